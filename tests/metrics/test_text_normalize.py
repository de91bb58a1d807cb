import pytest

from unirag.metrics.text_normalize import strip_answer_prefix


@pytest.mark.parametrize("raw, expected", [
    ("Caption [3]: A man is in a kitchen making pizzas.", "A man is in a kitchen making pizzas."),
    ('Caption [2]: "A dog runs on the beach."', "A dog runs on the beach."),
    ("caption: a red bus", "a red bus"),
    ("**Caption [6]:** Two cats asleep on a couch.", "Two cats asleep on a couch."),
    ("Caption for the query image [4]: A skier.", "A skier."),
    ("Answer - A plate of food", "A plate of food"),
    ("[5]: A train at a station", "A train at a station"),
    ("\u201cA surfer riding a wave.\u201d", "A surfer riding a wave."),
    ("  'A kite in the sky'  ", "A kite in the sky"),
    ("Caption 2: `A clock tower`", "A clock tower"),
])
def test_prefixes_and_quotes_are_removed(raw, expected):
    assert strip_answer_prefix(raw) == expected


@pytest.mark.parametrize("text", [
    "A man is in a kitchen making pizzas.",
    "Output of a factory line with bottles",      # 'Output' without a colon is content
    "Captions are written on the board: hello",   # not a label
    'He said "hi" to the dog',                    # inner quotes stay
    "A caption [3] printed on a sign",
])
def test_plain_captions_are_unchanged(text):
    assert strip_answer_prefix(text) == text


def test_empty_and_whitespace():
    assert strip_answer_prefix("   ") == ""
    assert strip_answer_prefix('Caption [1]: ""') == ""
