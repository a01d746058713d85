"""Method recipes; importing this registers their shapers (``shaping.name`` in configs)."""

from jaxmarl_llm.methods import dpm, handcrafted, lca, vgepf, xt, yolo  # noqa: F401
