"""minihead: a pure-NumPy reproduction of Voita et al. 2019 (ACL), "Analyzing Multi-Head
Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned".

The array module is chosen once in :mod:`minihead.backend`; every other module uses its ``xp``.
"""
__version__ = "0.1.0"
