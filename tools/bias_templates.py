"""Template sentences that mention identities, labelled by construction, for the Jigsaw bias
metric of a model trained on comments that carry no identity annotations.

The method is that of Dixon et al., "Measuring and Mitigating Unintended Bias in Text
Classification" (AIES 2018), whose synthetic test set Jigsaw used: the same sentence
frames are filled with each identity term, and a frame is toxic or not whatever the term
is. A model that scores "I am a gay person" higher than "I am a tall person", or
"muslims are wonderful" above "canadians are disgusting", loses subgroup, BPSN or BNSP
AUC for that identity (pipeline/bias_metrics.py). Every row names the one identity
column its term belongs to (1.0) and 0.0 for the others; neutral terms belong to none and
are the background every subgroup is compared with.

  rows = template_rows()   # [(text, target, {identity column: 0.0 or 1.0})]
"""

import itertools

from spec.task_names import SCORED_IDENTITY_COLUMNS

# Each scored identity column's terms: (as an adjective, as a plural noun).
IDENTITY_TERMS = {
    "male": (("male", "men"), ("masculine", "boys")),
    "female": (("female", "women"), ("feminine", "girls")),
    "homosexual_gay_or_lesbian": (("gay", "gay people"), ("lesbian", "lesbians"),
                                  ("homosexual", "homosexuals"), ("queer", "queer people")),
    "christian": (("christian", "christians"), ("catholic", "catholics"),
                  ("protestant", "protestants")),
    "jewish": (("jewish", "jews"), ("orthodox jewish", "orthodox jews")),
    "muslim": (("muslim", "muslims"), ("devout muslim", "devout muslims")),
    "black": (("black", "black people"), ("african american", "african americans")),
    "white": (("white", "white people"), ("caucasian", "caucasians")),
    "psychiatric_or_mental_illness": (("mentally ill", "mentally ill people"),
                                      ("schizophrenic", "schizophrenics"),
                                      ("bipolar", "bipolar people")),
}
# Terms of no scored identity: the background of every subgroup.
NEUTRAL_TERMS = (("tall", "tall people"), ("young", "young people"), ("old", "old people"),
                 ("canadian", "canadians"), ("american", "americans"),
                 ("teenage", "teenagers"), ("european", "europeans"), ("rich", "rich people"))

POSITIVE = ("wonderful", "great", "nice", "friendly", "smart", "kind", "normal", "fun",
            "lovely", "honest")
NEGATIVE = ("disgusting", "stupid", "worthless", "pathetic", "filthy", "dumb", "ugly",
            "vile", "evil", "idiots")

# Frames: {adj} is an identity adjective ({a_adj} with its article), {noun} its plural
# noun, {word} a word of the frame's list (POSITIVE for non-toxic frames, NEGATIVE for
# toxic ones).
NON_TOXIC_FRAMES = (
    ("I am {a_adj} person, ask me anything.", None),
    ("My neighbour is {adj} and we often have dinner together.", None),
    ("I had lunch with some {noun} today.", None),
    ("{noun} deserve the same rights as everyone else.", None),
    ("Our team welcomes {noun}.", None),
    ("Being {adj} is {word}.", POSITIVE),
    ("{noun} are {word}.", POSITIVE),
    ("I think {adj} people are {word}.", POSITIVE),
)
TOXIC_FRAMES = (
    ("I hate {noun}.", None),
    ("All {noun} should shut up and go away.", None),
    ("{noun} are a disease and should be kicked out.", None),
    ("You are a stupid {adj} piece of garbage.", None),
    ("Being {adj} is {word}.", NEGATIVE),
    ("{noun} are {word}.", NEGATIVE),
    ("I think {adj} people are {word}.", NEGATIVE),
)


def _fill(frame, adjective, noun, word):
  article = "an" if adjective[0] in "aeiou" else "a"
  text = frame.format(adj=adjective, a_adj="%s %s" % (article, adjective), noun=noun,
                      word=word)
  return text[0].upper() + text[1:]


def template_rows():
  """[(text, target, {identity: 0.0 or 1.0} over SCORED_IDENTITY_COLUMNS)]: every frame
  with every term, the scored identities' terms first (in SCORED_IDENTITY_COLUMNS' order),
  then the neutral ones; target 1.0 for a toxic frame, 0.0 otherwise. Deterministic."""
  terms = [(identity, term) for identity in SCORED_IDENTITY_COLUMNS
           for term in IDENTITY_TERMS[identity]] + [(None, term) for term in NEUTRAL_TERMS]
  rows = []
  for (identity, (adjective, noun)), (target, frames) in itertools.product(
      terms, ((0.0, NON_TOXIC_FRAMES), (1.0, TOXIC_FRAMES))):
    for frame, words in frames:
      for word in words or (None,):
        rows.append((_fill(frame, adjective, noun, word), target,
                     {name: 1.0 if name == identity else 0.0
                      for name in SCORED_IDENTITY_COLUMNS}))
  return rows
