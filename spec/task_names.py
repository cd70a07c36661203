"""The names that tasks' readers and the options share: XNLI's languages, and the Jigsaw
columns that the reader and the bias metric share. (The tasks themselves are known by the
names their processors carry: data/processors.py.)
"""

# XNLI's fifteen languages; Google's run_classifier trains and evaluates zh.
XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur",
                  "vi", "zh")
XNLI_DEFAULT_LANGUAGE = "zh"


# Kaggle's Jigsaw Toxic Comment labels (the first is the default label column), and the
# Unintended Bias files' target and auxiliary toxicity columns.
JIGSAW_TOXIC_LABEL_COLUMNS = ("toxic", "severe_toxic", "obscene", "threat", "insult",
                              "identity_hate")
JIGSAW_BIAS_TARGET = "target"
JIGSAW_BIAS_AUXILIARY_COLUMNS = ("severe_toxicity", "obscene", "identity_attack", "insult",
                                 "threat", "sexual_explicit")

# Every identity column of Kaggle's Jigsaw Unintended Bias files, and whether the
# competition scored it (the identities with at least 500 test rows). The reader
# carries them all into the outputs; the bias metric scores the scored ones, in this
# order.
JIGSAW_IDENTITIES = (
    ("male", True), ("female", True), ("transgender", False), ("other_gender", False),
    ("heterosexual", False), ("homosexual_gay_or_lesbian", True), ("bisexual", False),
    ("other_sexual_orientation", False), ("christian", True), ("jewish", True),
    ("muslim", True), ("hindu", False), ("buddhist", False), ("atheist", False),
    ("other_religion", False), ("black", True), ("white", True), ("asian", False),
    ("latino", False), ("other_race_or_ethnicity", False), ("physical_disability", False),
    ("intellectual_or_learning_disability", False), ("psychiatric_or_mental_illness", True),
    ("other_disability", False))
JIGSAW_IDENTITY_COLUMNS = tuple(name for name, _ in JIGSAW_IDENTITIES)
SCORED_IDENTITY_COLUMNS = tuple(name for name, scored in JIGSAW_IDENTITIES if scored)
