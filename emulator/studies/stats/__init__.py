"""What every study's numbers rest on: the two-level bootstrap and its estimates, the units a
run gives a statistic, the verdict rule, the runs the project flagged, and how it all prints.

- bootstrap: the statistics, the samples of units per repeat and the resampling;
- estimates: a statistic with its interval, and two sides (alone, mixed) compared;
- units: what one collective type of one run gives the bootstrap, and the CV its stamps resolve;
- verdict: the thresholds, the one rule of every study (judge) and the checks it gives;
- flags: the runs the project flagged, left out of every statistic unless asked;
- formatting: intervals and ratios as the tables print them, and JSON without infinities.
"""
