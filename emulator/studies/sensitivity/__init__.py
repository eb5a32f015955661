"""The bandwidth sensitivity study (issue 18; the Chakra paper's Fig. 7): one workload at several
link rates.

- study: runs the scenario at each rate (or reuses finished runs) and writes the study folder;
- analysis: per collective type each rate's slowdown against the first, and the verdict;
- text: sensitivity.txt's tables;
- plots: the slowdown per collective type and rate (Fig. 7's form);
- page: the study's report.html.
"""

# What the study writes into its folder (study.py) and its page reads (page.py).
SENSITIVITY_JSON, SENSITIVITY_TEXT = "sensitivity.json", "sensitivity.txt"
