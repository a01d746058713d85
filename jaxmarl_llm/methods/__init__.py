"""Method recipes; importing this registers their shapers (``shaping.name`` in configs)
and their prompt templates (``jaxmarl_llm.lm.templates``)."""

from jaxmarl_llm.methods import dpm, handcrafted, lca, verco, vgepf, xt, yolo  # noqa: F401
