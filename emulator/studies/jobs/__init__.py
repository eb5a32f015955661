"""The jobs study (issue 18): each job of a several-jobs scenario alone, then all together.

- study: runs every condition (all jobs, each job alone) and writes the study folder;
- analysis: per job and collective type each metric alone and together, and the verdict;
- text: jobs.txt's table;
- page: the study's report.html.
"""

# What the study writes into its folder (study.py) and its page reads (page.py).
JOBS_JSON, JOBS_TEXT = "jobs.json", "jobs.txt"
