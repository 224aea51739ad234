#!/usr/bin/env python3
"""A candidate controller for `limiter-user simulate --algorithm external:CMD`: two regimes
and Little's law, with every change of the limit given a reason (on stderr with -v).

Windows last two typical latencies (at least 100 ms, at most 5 s) and close with at least
5 answers or failures.

healthy   the destination answers as it normally does, whatever that is. Nothing is cut:
          a bound limit (the window's peak in-flight at 0.8 of it) doubles once 5 answers
          admitted since its last change came back no slower than the normal p90; a limit
          not bound settles to twice the peak in-flight of the last 100 windows, plus 4.
          The normal is learned here: the last 50 windows' medians and means, the last
          2 000 answers.
incident  half a window's answers or more (failures counted as slow) are slower than 9 in
          10 normal answers, at odds under 1 in 10 000 were the window normal. The goal is
          then no queue at the upstream. The service time is the median of the means of the
          incident's windows without a queue (the normal one at first). A window queues when
          the answers admitted since the last change waited, on average, more than half a
          request over what the service time explains (Little's law: served/s x (mean
          latency - service time)), beyond twice its noise; failures of a tenth of them are
          a queue too. A queue cuts the limit to the most the upstream served in the
          incident's last 20 windows times the service time: the knee. If the answers
          admitted after a cut still take over 1.25x the service time, the service itself is
          slower: the service time starts over from them, the knee and the throughput are
          forgotten. Without a queue, a bound limit grows once its change has been seen (3
          service times): doubling under half the knee, by a tenth (at least 1) every 5
          growths over it. The knee is forgotten past 1.5x it, once the service time has
          moved over 1.25x from the one it was found at, and in a window near normal.
          Failures with no answer halve
          it, once per change. Three windows in a row with a median within 1.25x the normal
          and no failure end the incident.

docs/experiments/2026-12-07-a-littles-law-controller.md has what it scored.
"""

import math
import statistics
import sys
from collections import deque

BOUND = 0.8  # a window's peak in-flight at this share of the limit: the limit binds
HEADROOM = 2.0  # a healthy limit not bound settles to this times the recent peak, plus 4
SLACK = 4
TOL = 0.25  # a median within 1.25x the reference is not slower
LEARN = 20  # healthy windows before an incident can be called
NORMAL_WINDOWS = 50
NORMAL_ANSWERS = 2000
PEAK_WINDOWS = 100
SURPRISE = 1e-4  # odds under which a window's share of slow answers is not chance
CALM = 3  # windows near normal that end an incident
SERVICE_WINDOWS = 20
PROBE_EVERY = 5
MIN_ANSWERS = 5
MIN_WINDOW_NS = 100_000_000
MAX_WINDOW_NS = 5_000_000_000

VERBOSE = "-v" in sys.argv[1:]


def chance(slow, answers):
    """The odds of `slow` or more of `answers` over the normal p90, were the window normal."""
    return sum(math.comb(answers, k) * 0.1**k * 0.9 ** (answers - k) for k in range(slow, answers + 1))


class Window:
    def __init__(self, start_ns):
        self.start_ns = start_ns
        self.latencies = []
        self.admitted = []  # when each answered request was admitted
        self.peak = 0
        self.failed = 0
        self.failed_admitted = []  # when each failed request was admitted, where known

    def answers_since(self, t_ns):
        return [l for l, a in zip(self.latencies, self.admitted) if t_ns is None or a >= t_ns]

    def failures_since(self, t_ns):
        return sum(1 for a in self.failed_admitted if t_ns is None or a >= t_ns)


class Destination:
    def __init__(self, lowest, highest):
        self.limit, self.lowest, self.highest = float(highest), float(lowest), float(highest)
        self.normal_medians = deque(maxlen=NORMAL_WINDOWS)
        self.normal_means = deque(maxlen=NORMAL_WINDOWS)
        self.normal_answers = deque(maxlen=NORMAL_ANSWERS)
        self.peaks = deque(maxlen=PEAK_WINDOWS)
        self.incident = False
        self.changed_at = None  # the last cut or growth in the incident

    def typical_ns(self):
        if self.incident:
            return self.service_median
        return statistics.median(self.normal_medians) if self.normal_medians else None

    def set(self, limit, reason, now_ns):
        if VERBOSE and int(limit) != int(self.limit):
            print(f"{now_ns / 1e9:.1f} s: {int(self.limit)} -> {int(limit)}: {reason}", file=sys.stderr)
        self.limit = max(self.lowest, min(self.highest, limit))

    def close(self, w, now_ns):
        self.peaks.append(w.peak)
        if not self.incident and not self.starts_incident(w):
            if w.latencies:
                self.healthy(w, now_ns)
        elif w.latencies:
            self.in_incident(w, now_ns)
        elif w.failures_since(self.changed_at):
            self.set(self.limit / 2, "failures and no answer", now_ns)
            self.changed_at = now_ns

    def starts_incident(self, w):
        if len(self.normal_medians) < LEARN or len(self.normal_answers) < 100:
            return False
        p90 = self.normal_p90()
        slow = sum(1 for l in w.latencies if l > p90) + w.failed
        answers = len(w.latencies) + w.failed
        if slow < answers / 2 or chance(slow, answers) >= SURPRISE:
            return False
        self.incident = True
        self.service_median = statistics.median(self.normal_medians)
        self.service_mean = statistics.median(self.normal_means)
        self.calm_medians = deque([self.service_median], maxlen=SERVICE_WINDOWS)
        self.calm_means = deque([self.service_mean], maxlen=SERVICE_WINDOWS)
        self.knee = self.cut_to = self.cut_at = None
        self.calm = self.since_probe = 0
        self.served = deque(maxlen=SERVICE_WINDOWS)
        return True

    def normal_p90(self):
        return sorted(self.normal_answers)[int(0.9 * len(self.normal_answers))]

    def healthy(self, w, now_ns):
        self.normal_medians.append(statistics.median(w.latencies))
        self.normal_means.append(statistics.fmean(w.latencies))
        self.normal_answers.extend(w.latencies)
        if w.peak >= BOUND * self.limit:
            fresh = w.answers_since(self.changed_at)
            if len(fresh) >= MIN_ANSWERS and (len(self.normal_answers) < 100 or statistics.median(fresh) <= self.normal_p90()):
                self.set(self.limit * 2, "healthy and bound: doubled", now_ns)
                self.changed_at = now_ns
        elif len(self.normal_medians) >= LEARN:
            settled = HEADROOM * max(self.peaks) + SLACK
            if settled < self.limit:
                self.set(settled, "healthy: twice the recent peak in-flight", now_ns)

    def in_incident(self, w, now_ns):
        median, mean = statistics.median(w.latencies), statistics.fmean(w.latencies)
        served = len(w.latencies) / ((now_ns - w.start_ns) / 1e9)
        normal = statistics.median(self.normal_medians)
        self.calm = self.calm + 1 if median <= normal * (1 + TOL) and not w.failed else 0
        if self.calm >= CALM:
            self.incident = False
        self.served.append(served)
        # Only answers admitted since the last change tell whether it left a queue.
        fresh = w.answers_since(self.changed_at)
        queue, queued = False, 0.0
        if len(fresh) >= MIN_ANSWERS:
            spread = statistics.pstdev(fresh)
            queued = served * (statistics.fmean(fresh) - self.service_mean) / 1e9
            noise = served * 2 * spread / len(fresh) ** 0.5 / 1e9
            queue = queued > 0.5 + noise or w.failures_since(self.changed_at) > len(fresh) // 10
        after_cut = w.answers_since(self.cut_at) if self.cut_at is not None else []
        if self.cut_to is not None and len(after_cut) >= MIN_ANSWERS:
            if statistics.median(after_cut) > self.service_median * (1 + TOL):
                self.service_median = statistics.median(after_cut)
                self.service_mean = statistics.fmean(after_cut)
                self.calm_medians = deque([self.service_median], maxlen=SERVICE_WINDOWS)
                self.calm_means = deque([self.service_mean], maxlen=SERVICE_WINDOWS)
                self.knee = self.cut_to = self.cut_at = None
                self.since_probe = 0
                self.served = deque(maxlen=SERVICE_WINDOWS)
                if VERBOSE:
                    print(f"{now_ns / 1e9:.1f} s: slower service, not a queue: {self.service_median / 1e6:.0f} ms", file=sys.stderr)
                return
        if queue:
            target = max(self.served) * self.service_mean / 1e9
            self.set(min(self.limit, target), f"queue of {queued:.1f}: served/s x service time", now_ns)
            self.knee, self.knee_service = self.limit, self.service_median
            self.changed_at = now_ns
            if self.cut_to is None:
                self.cut_to, self.cut_at = self.limit, now_ns
            return
        self.calm_medians.append(median)
        self.calm_means.append(mean)
        self.service_median = statistics.median(self.calm_medians)
        self.service_mean = statistics.median(self.calm_means)
        # A knee holds only at the service time it was found at, and not once answers are
        # back near normal.
        if self.knee and (self.calm or not self.knee_service / (1 + TOL) <= self.service_median <= self.knee_service * (1 + TOL)):
            self.knee = None
        if self.cut_to is not None and len(after_cut) >= MIN_ANSWERS:
            self.cut_to = self.cut_at = None
        seen = self.changed_at is None or now_ns - self.changed_at >= 3 * self.service_median
        if w.peak < BOUND * self.limit or len(w.answers_since(self.changed_at)) < MIN_ANSWERS or not seen:
            return
        self.changed_at = now_ns
        if self.knee and self.limit >= self.knee / 2:
            self.since_probe += 1
            if self.since_probe >= PROBE_EVERY:
                self.since_probe = 0
                self.set(self.limit + max(1, 0.1 * self.limit), "no queue, bound, near the knee: a tenth more", now_ns)
                if self.limit >= 1.5 * self.knee:
                    self.knee = None
        else:
            self.set(self.limit * 2, "no queue, bound, under the knee: doubled", now_ns)


def main() -> None:
    dest = None
    window = Window(None)
    for line in sys.stdin:
        word, *args = line.split()
        if word == "init":
            _, lowest, highest = (int(a) for a in args)
            dest = Destination(lowest, highest)
        elif word == "sample":
            now, latency, inflight = (int(a) for a in args)
            window.latencies.append(latency)
            window.admitted.append(now - latency)
            window.peak = max(window.peak, inflight)
        elif word == "connect":
            window.peak = max(window.peak, int(args[1]))
        elif word == "outcome":
            # A client that gave up after longer than the normal answer takes: a timeout.
            normal = statistics.median(dest.normal_medians) if dest.normal_medians else None
            if args[1] in ("timeout", "error") or (args[1] == "gave_up" and normal and int(args[2]) > normal):
                window.failed += 1
                waited = int(args[2]) if args[1] == "gave_up" else 0
                window.failed_admitted.append(int(args[0]) - waited)
        elif word == "tick":
            now = int(args[0])
            if window.start_ns is None:
                window.start_ns = now
            typical = dest.typical_ns()
            length = now - window.start_ns
            want = max(MIN_WINDOW_NS, 2 * typical) if typical else MIN_WINDOW_NS
            if (length >= want and len(window.latencies) + window.failed >= MIN_ANSWERS) or length >= MAX_WINDOW_NS:
                dest.close(window, now)
                window = Window(now)
            print(int(dest.limit), flush=True)


if __name__ == "__main__":
    main()
