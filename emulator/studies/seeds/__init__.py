"""A series of seeds (`emulate run SCENARIO --seeds N`): one scenario with N seeds, and each
number with its confidence interval over them.

- series: runs the seeds and writes the estimates;
- page: the series' report.html.
"""

# What the series writes into its folder (series.py) and its page reads (page.py): the
# estimates, their text, and each seed's results folder.
SEEDS_JSON, SEEDS_TEXT, RUN_FOLDER = "seeds.json", "seeds.txt", "seed-{seed}"
