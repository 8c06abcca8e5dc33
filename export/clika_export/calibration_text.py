"""Text run through a model to measure the range of its attention keys and values.

Mixed on purpose (prose, a dialogue, code, numbers, a list), so every kind of
token a chat sees has passed through each layer once. Written for this
project; nothing here is quoted from elsewhere.
"""

from __future__ import annotations

CALIBRATION_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You are a helpful assistant. Answer clearly and briefly."},
    {
        "role": "user",
        "content": "Explain why the sky looks blue at noon and red at sunset, then give me a one-line summary.",
    },
    {
        "role": "assistant",
        "content": (
            "Sunlight holds every colour. Air molecules scatter short wavelengths far more than long ones, "
            "so at noon blue light reaches your eyes from every part of the sky. At sunset the light crosses "
            "much more air before it arrives; most of the blue is scattered away on the way, and the reds "
            "and oranges are what is left.\n\nSummary: short waves scatter more, and a longer path removes them."
        ),
    },
    {
        "role": "user",
        "content": "Write a Python function that returns the n-th Fibonacci number, and test it for n = 0..10.",
    },
    {
        "role": "assistant",
        "content": (
            '```python\ndef fibonacci(n: int) -> int:\n    """The n-th Fibonacci number (0, 1, 1, 2, ...)."""\n'
            '    if n < 0:\n        raise ValueError(f"n must be >= 0, got {n}")\n    a, b = 0, 1\n'
            "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\n"
            "assert [fibonacci(i) for i in range(11)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55]\n```\n"
            "The loop keeps two numbers, so it runs in O(n) time and O(1) memory."
        ),
    },
    {
        "role": "user",
        "content": (
            "Plan a three-day trip to a coastal town in October for two people with a budget of 900 euros. "
            "List costs per day."
        ),
    },
    {
        "role": "assistant",
        "content": (
            "Day 1: train there (2 x 45 EUR), guesthouse (110 EUR), harbour walk and fish dinner (60 EUR). "
            "Total: 260 EUR.\nDay 2: bike hire (30 EUR), lighthouse museum (2 x 8 EUR), picnic lunch (20 EUR), "
            "guesthouse (110 EUR), dinner (55 EUR). Total: 231 EUR.\nDay 3: boat tour along the cliffs "
            "(2 x 35 EUR), lunch (40 EUR), train home (2 x 45 EUR). Total: 200 EUR.\n"
            "Grand total: 691 EUR, which leaves 209 EUR for coffee, rain gear and surprises."
        ),
    },
    {
        "role": "user",
        "content": (
            "Translate into French and German: 'The meeting moved to Thursday at 3 pm; bring the report.' "
            "Then tell me what 17 * 23 is, and what year came 250 years after 1776."
        ),
    },
    {
        "role": "assistant",
        "content": (
            "French: « La réunion a été déplacée à jeudi à 15 h ; apportez le rapport. »\n"
            "German: „Das Treffen wurde auf Donnerstag um 15 Uhr verschoben; bringen Sie den Bericht mit.“\n"
            "17 * 23 = 391, and 1776 + 250 = 2026."
        ),
    },
)

# For a model without a chat template: the same content as plain text.
CALIBRATION_TEXT = "\n\n".join(message["content"] for message in CALIBRATION_MESSAGES)
