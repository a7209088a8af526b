"""A blind human-preference study (the paper's Table 3): export a kit, serve it to raters, analyse the votes.

Kit layout (``grpo-bench study export RUN_DIR --out KIT``)::

    KIT/
      clips/<clip id>.mp4   the videos raters see (ids are random tokens: they say nothing)
      pairs.json            what the server shows: pair id, prompt, the two clip ids (no method names);
                            design.blocks: the pairs of each block of raters (grpo_bench.study.design)
      key.json              clip id -> row, seed, prompt, sample, scores; pair id -> kind (never served)
      votes.sqlite          the raters' answers and blocks (``study serve``; schema in grpo_bench.study.votes)
      analysis/             table3.{md,csv,tex}, table3.png, summary.json (``study analyze``)
"""
