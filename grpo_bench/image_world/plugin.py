"""What the image world registers, imported by the core's plug-in loader (pyproject's ``grpo_bench.plugins``
entry point ``image_world``): the compositional task's model, oracle reward and prompt set, and the text task's
models (plain and ink-decoded), OCR reward, exact reader and prompt set; and each task's roles
(grpo_bench/world/roles.py) and the pretraining of its shipped nets (grpo_bench/world/pretrainers.py), so that no
module outside this package names them."""

from grpo_bench.image_world import judge, model, reward, text_model, text_reward
from grpo_bench.world.pretrainers import PRETRAINERS, Pretrainer
from grpo_bench.world.roles import WORLDS, WorldRoles

WORLDS.register(model.NAME)(WorldRoles(model=model.NAME, judge=judge.NAME, oracle=model.ORACLE,
                                       prompts=model.PROMPT_SET))
for _text in (text_model.NAME, text_model.INK_NAME):  # the same task, decoded plainly or through the ink decoder
    WORLDS.register(_text)(WorldRoles(model=_text, judge=text_model.TRAINING_REWARD, oracle=text_model.ORACLE,
                                      prompts=text_model.PROMPT_SET))

# `grpo-bench pretrain net NAME`: each shipped net rebuilt by its own module (imported only then)
PRETRAINERS.register(model.NAME)(Pretrainer("grpo_bench.image_world.pretrain",
                                            "the compositional task's base net (rectified flow, training prompts)"))
PRETRAINERS.register(text_model.NAME)(Pretrainer("grpo_bench.image_world.text_pretrain",
                                                 "the text task's base net (rectified flow, training words)"))
PRETRAINERS.register(judge.NAME)(Pretrainer("grpo_bench.image_world.judge_pretrain",
                                            "the compositional task's learned judge (regresses the checker)"))

__all__ = ["judge", "model", "reward", "text_model", "text_reward"]
