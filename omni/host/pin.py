"""Exec trampoline for hosts without numactl: ``python -m omni.host.pin CPUS -- ARGV``.

Sets the CPU affinity of this process, then execs ARGV, which inherits it.
Used instead of ``preexec_fn``, which is unsafe in a threaded orchestrator.
"""

import os
import sys

from omni.cpulist import parse_cpulist

if __name__ == "__main__":
    cpus, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        sys.stderr.write("usage: python -m omni.host.pin CPUS -- COMMAND...\n")
        sys.exit(2)
    os.sched_setaffinity(0, parse_cpulist(cpus))
    os.execvp(argv[0], argv)
