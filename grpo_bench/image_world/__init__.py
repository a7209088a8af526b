"""The image world: a second embedded world of 32x32 still images with compositional prompts (counts, colours,
shapes, relative positions), exact ground truth and a small conditional flow-matching base model.

It is a plug-in of the core (pyproject's ``grpo_bench.plugins`` entry point loads ``plugin.py``): its model,
its oracle reward and its prompt set register through the registries, and no module outside this package
names them (docs/image_world.md).

* ``grammar.py``: vocabulary, the prompt grammar, held-out combinations, prompt splits;
* ``render.py``: procedural scenes for a prompt (the pretraining data);
* ``checker.py``: the exact checker of a generated image (palette segmentation, components, shapes, counts,
  positions), the oracle;
* ``net.py``: the 2D conditional U-Net; ``model.py``: the generator behind the model protocol;
* ``reward.py``: the oracle as a reward and the prompt set; ``pretrain.py``: the base model's training;
* ``judge.py``, ``judge_pretrain.py``: the learned, hackable judge of the compositional task (the judge track);
* the text task: ``words.py`` (vocabulary, held-out words), ``text_render.py`` (Pillow's font), ``text_checker.py``
  (the exact reader, its held-out evaluator), ``text_net.py`` / ``text_model.py`` (its base model),
  ``text_reward.py`` (the PP-OCRv4 reward, the reader as ground truth, the prompt set), ``text_pretrain.py``.
"""
