#!/usr/bin/env python3
"""A reference external algorithm for `limiter-user simulate --algorithm external:CMD`.

AIMD, as the specification words it: +1 while busy, x0.9 on an error or a timeout.
It reads the simulator's events on stdin and answers every tick with a limit:

    init <initial> <min> <max>
    sample <now_ns> <latency_ns> <inflight>
    connect <now_ns> <inflight>                    (ignored here)
    outcome <now_ns> error|timeout|shed
    outcome <now_ns> gave_up|hung_up <waited_ns>   (a close while awaiting a response)
    tick <now_ns>                          -> answer one line: the limit

Run it with:
    limiter-user simulate --scenario errors --algorithm "external:python3 limiter-sim/external/aimd.py"
"""

import sys


def main() -> None:
    limit = minimum = maximum = 0
    busy = failed = False
    fastest = None  # the quickest answer seen: a close sooner than that is a goodbye
    for line in sys.stdin:
        word, *args = line.split()
        if word == "init":
            limit, minimum, maximum = (int(a) for a in args)
        elif word == "sample":
            # Busy: the request found the destination at least half full.
            busy = busy or 2 * int(args[2]) >= limit
            latency = int(args[1])
            fastest = latency if fastest is None else min(fastest, latency)
        elif word == "outcome":
            closed = args[1] in ("gave_up", "hung_up")
            gave_up = closed and (fastest is None or int(args[2]) > fastest)
            failed = failed or args[1] in ("error", "timeout") or gave_up
        elif word == "tick":
            if failed:
                limit = int(limit * 0.9)
            elif busy:
                limit += 1
            limit = max(minimum, min(maximum, limit))
            busy = failed = False
            print(limit, flush=True)


if __name__ == "__main__":
    main()
