"""The studies: several runs of the emulator set against each other, with confidence intervals.

- interference: each collective alone, then mixed (`emulate study interference`);
- jobs: each job of a several-jobs scenario alone, then all together (`emulate study jobs`);
- sensitivity: one workload at several link rates (`emulate study sensitivity`);
- load_balancing: ECMP, spraying, flowlets and adaptive routing, with go-back-N and selective
  repeat (`emulate study load-balancing`);
- seeds: one scenario with N seeds, each number with its interval (`emulate run --seeds N`);
- stats: what they share: the two-level bootstrap, the verdict rule, the flagged runs;
- launch: what every study checks before its runs start, and its default folder.

Each study writes its JSON, its text and last its report.html, the page that lives beside it
(its page module, registered with the page kit, collectors.pages.kit).
"""
