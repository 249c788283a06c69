"""OrderProbe ("How Order-Sensitive Are LLMs? OrderProbe for Deterministic Structural
Reconstruction", 2026): recover a four-unit expression (Chinese/Japanese idiom, Korean
sajaseong-eo) from one of its 23 scrambled orders.

Data path: ``sources`` (items) → ``permutations`` (the 23 non-identity orders of ABCD + the
unperturbed run) → ``plan`` (versioned prompts per language × setting, requests, scored rows) →
``extract`` (the four-unit parser) → ``metrics`` (recovery with item-level bootstrap CIs, per
pattern / structure / frequency bin / adjacency, error categories) and ``semantic`` (S_Acc,
S_Logic, S_Info, S_Cons, S_Rob), ``regression`` (Logit of exact recovery); ``schemas`` for every
table, ``report`` for the headline, ``vocab`` for the study's names.
"""

__all__: list[str] = []
