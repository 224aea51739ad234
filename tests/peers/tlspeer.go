// tlspeer: Go's own TLS and HTTP stacks (crypto/tls, net/http) as a server and as clients,
// for the kernel tests' protocol matrix.
//
//	tlspeer cert DIR
//	    writes DIR/cert.pem and DIR/key.pem, a self-signed ECDSA certificate for 127.0.0.1
//	tlspeer serve --dir DIR --tls 1.2|1.3 --first-byte-ms N [--slow-ms N] [--stream-ms N] [--h1]
//	    HTTPS on a loopback port, printed as "listening PORT": each answer's first byte after
//	    first-byte-ms (slow-ms after SIGUSR1, first-byte-ms again after SIGUSR2), then, with
//	    --stream-ms, a chunk every 100 ms for that long; --h1 refuses HTTP/2
//	tlspeer get --url URL --requests N [--h2] [--new-connections]
//	    N requests one after another, on one keep-alive connection unless --new-connections;
//	    prints each one's time to first byte: "ttfb_ns N"
//	tlspeer load --url URL --rate R --seconds S
//	    open loop: R requests a second for S seconds, each on an idle keep-alive connection
//	    or a new one; prints "done OK FAILED"
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: tlspeer cert|serve|get|load ...")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "cert":
		cert(args)
	case "serve":
		serve(args)
	case "get":
		get(args)
	case "load":
		load(args)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "tlspeer:", msg)
	os.Exit(2)
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func cert(args []string) {
	if len(args) != 1 {
		fail("usage: tlspeer cert DIR")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	template := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	check(err)
	keyDer, err := x509.MarshalECPrivateKey(key)
	check(err)
	write := func(name, kind string, der []byte) {
		f, err := os.Create(filepath.Join(args[0], name))
		check(err)
		check(pem.Encode(f, &pem.Block{Type: kind, Bytes: der}))
		check(f.Close())
	}
	write("cert.pem", "CERTIFICATE", der)
	write("key.pem", "EC PRIVATE KEY", keyDer)
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("dir", "", "directory of cert.pem and key.pem")
	version := fs.String("tls", "1.3", "1.2 or 1.3")
	firstByte := fs.Int("first-byte-ms", 0, "time to each answer's first byte")
	slow := fs.Int("slow-ms", 0, "time to first byte after SIGUSR1")
	stream := fs.Int("stream-ms", 0, "how long each answer streams after its first byte")
	h1 := fs.Bool("h1", false, "refuse HTTP/2")
	check(fs.Parse(args))
	config := &tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13}
	if *version == "1.2" {
		config = &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}
	}
	var delayMs atomic.Int64
	delayMs.Store(int64(*firstByte))
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range signals {
			if s == syscall.SIGUSR1 {
				delayMs.Store(int64(*slow))
			} else {
				delayMs.Store(int64(*firstByte))
			}
		}
	}()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(delayMs.Load()) * time.Millisecond)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "first\n")
		w.(http.Flusher).Flush()
		for end := time.Now().Add(time.Duration(*stream) * time.Millisecond); time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
			fmt.Fprint(w, "more\n")
			w.(http.Flusher).Flush()
		}
	})
	server := &http.Server{Handler: handler, TLSConfig: config}
	if *h1 {
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	fmt.Printf("listening %d\n", listener.Addr().(*net.TCPAddr).Port)
	check(server.ServeTLS(listener, filepath.Join(*dir, "cert.pem"), filepath.Join(*dir, "key.pem")))
}

// A client that trusts any certificate: the tests' servers are their own.
func client(h2 bool, newConnections bool) *http.Client {
	transport := &http.Transport{
		// A session cache: a new connection resumes the last one's session (tickets).
		TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true,
			ClientSessionCache: tls.NewLRUClientSessionCache(64),
		},
		DisableKeepAlives:   newConnections,
		MaxIdleConnsPerHost: 1000,
		ForceAttemptHTTP2:   h2,
	}
	if !h2 {
		transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: transport, Timeout: 60 * time.Second}
}

func get(args []string) {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	url := fs.String("url", "", "what to get")
	requests := fs.Int("requests", 1, "how many, one after another")
	h2 := fs.Bool("h2", false, "offer HTTP/2")
	newConnections := fs.Bool("new-connections", false, "a new connection per request")
	check(fs.Parse(args))
	c := client(*h2, *newConnections)
	for i := 0; i < *requests; i++ {
		var start, first time.Time
		trace := &httptrace.ClientTrace{
			WroteRequest:         func(httptrace.WroteRequestInfo) { start = time.Now() },
			GotFirstResponseByte: func() { first = time.Now() },
		}
		req, err := http.NewRequest("GET", *url, nil)
		check(err)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		// The clock starts before the request is written: what the kernel measures lies
		// between the server's delay and this.
		begin := time.Now()
		resp, err := c.Do(req)
		check(err)
		_, err = io.Copy(io.Discard, resp.Body)
		check(err)
		check(resp.Body.Close())
		if start.IsZero() || first.IsZero() {
			fail("no trace of the request")
		}
		fmt.Printf("ttfb_ns %d\n", first.Sub(begin).Nanoseconds())
	}
}

func load(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	url := fs.String("url", "", "what to get")
	rate := fs.Float64("rate", 10, "requests a second")
	seconds := fs.Float64("seconds", 10, "for how long")
	check(fs.Parse(args))
	c := client(false, false)
	// Idle connections close after 2 s, as a service's pool sheds what a burst opened: the
	// pool then holds what the rate needs at the current latency, and grows with it.
	c.Transport.(*http.Transport).IdleConnTimeout = 2 * time.Second
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / *rate)
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	for next := time.Now(); next.Before(end); next = next.Add(interval) {
		time.Sleep(time.Until(next))
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(*url)
			if err != nil {
				failed.Add(1)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				failed.Add(1)
				return
			}
			ok.Add(1)
		}()
	}
	wg.Wait()
	fmt.Printf("done %d %d\n", ok.Load(), failed.Load())
}
