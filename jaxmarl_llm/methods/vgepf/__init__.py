"""V-GEPF: a CLIP potential over rendered football frames, with the instruction (skill)
chosen every few epochs by a selector."""
