"""CPU of the leak scan alone on one streamed answer: what reading an answer costs per token.

The answer is ``bench/protection.py``'s 512-token sample, fed in 16-character chunks to an
``AnswerScanner`` over an in-process index that holds 50 other tenants' 1k-token prompts (none of
which the answer copies, so it is read to the end). Prints min / median CPU ms per answer over
``--repeat`` runs. Run it on two trees to compare them (same machine, alternated).

    python bench/leak_scan_cost.py --repeat 15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kvfence.gateway.protection.leak.fingerprint import Fingerprinter
from kvfence.gateway.protection.leak.index import InMemoryIndex
from kvfence.gateway.protection.leak.scan import LeakMonitor
from protection import sample_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    monitor = LeakMonitor(InMemoryIndex(900), Fingerprinter(b"bench-leak-scan-cost-key", 4))
    for tenant in range(50):
        monitor.record_prompt(f"tenant{tenant}", [sample_prompt(1000, seed=100 + tenant)])
    answer = sample_prompt(args.tokens, seed=11)
    cpu_ms = []
    for _ in range(args.repeat):
        started = time.process_time()
        scanner = monitor.scanner("acme", frozenset())
        for i in range(0, len(answer), 16):
            scanner.feed(answer[i:i + 16])
        scanner.finish()
        cpu_ms.append((time.process_time() - started) * 1000)
    print(f"leak scan of a {args.tokens}-token answer ({len(answer)} chars, {len(answer.split())} words): "
          f"CPU ms min {min(cpu_ms):.2f} / median {statistics.median(cpu_ms):.2f} over {args.repeat} runs")


if __name__ == "__main__":
    main()
