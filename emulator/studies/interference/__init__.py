"""The interference study (issue 8; the Chakra paper, section 5.3): each collective alone, then
mixed.

- study: runs the three conditions (or reuses finished runs) and writes the study folder;
- checks: the six checks, each a question of the runs' units with a verdict;
- text: the runs and checks tables and the notes, for study.txt and the terminal;
- plots: the paper's Fig. 10 and 11 over every repeat;
- page: the study's report.html.
"""

# What the study writes into its folder (study.py) and its page reads (page.py).
STUDY_JSON, STUDY_TEXT = "study.json", "study.txt"
