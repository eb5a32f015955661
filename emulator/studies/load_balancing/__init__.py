"""The load-balancing study (issue 36): one scenario under each way of spreading packets over the
fabric's equal-cost paths, with the transport that has to cope with it.

- conditions: the conditions (a registry), the scenario override each one is, --conditions;
- runs: one run read back (its units, transport counters, link balance and flags);
- analysis: every metric of every condition with its interval, and against ECMP with go-back-N;
- checks: the questions the study answers, each with its verdict, and their thresholds;
- study: runs the conditions (or reuses finished runs) and writes the study folder;
- text, plots, page: study.txt, the figures, report.html.
"""

# What the study writes into its folder (study.py) and its page reads (page.py).
STUDY_JSON, STUDY_TEXT = "study.json", "study.txt"
