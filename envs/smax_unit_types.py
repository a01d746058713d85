"""SMAX's unit types: their names, in the order of SMAX's unit type ids."""

UNIT_TYPES = ("marine", "marauder", "stalker", "zealot", "zergling", "hydralisk")
MARINE, MARAUDER, STALKER, ZEALOT, ZERGLING, HYDRALISK = range(6)
