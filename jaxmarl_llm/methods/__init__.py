"""Method recipes; importing this registers their shapers (``shaping.name`` in configs)."""

from jaxmarl_llm.methods import dpm, handcrafted, lca, vgepf, yolo  # noqa: F401
