"""GPT-SoVITS's English text normalisation (upstream `text/en_normalization/expend.py` `normalize`), with the
few `inflect` readings it asks for (`number_to_words`, `ordinal`; inflect 7.6's algorithm, reproduced so
its quirks stay: "one million and twenty-one", "nineteen oh five", "one hundred and first").

Upstream's rules, in its order: "N. " -> ordinal + ", "; "a - b" / "a + b" ... -> "minus" / "plus" ...;
" -5" -> "negative 5" (the space before it is swallowed, as upstream's); thousands commas; 24-hour times
-> "one thirty p.m."; measurement suffixes (m, km, ft, L, h, min, s, °C, ...); £ / $ amounts; decimals
"point"; fractions "three fourths"; "21st"; remaining integers (years 1001-2999 in pairs); accents
stripped; "%"; every other character outside letters, spaces and ' . , ? ! - dropped; i.e. / e.g.;
capitals inside a word split off.
"""
from __future__ import annotations

import re
import unicodedata

_UNIT = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEEN = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TEN = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_MILL = [" ", " thousand", " million", " billion", " trillion", " quadrillion", " quintillion", " sextillion",
         " septillion", " octillion", " nonillion", " decillion"]
_NTH = {0: "th", 1: "st", 2: "nd", 3: "rd", 4: "th", 5: "th", 6: "th", 7: "th", 8: "th", 9: "th",
        11: "th", 12: "th", 13: "th"}
_ORDINAL_WORD = {"ty": "tieth", "one": "first", "two": "second", "three": "third", "five": "fifth",
                 "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_ORDINAL_SUFFIX = re.compile(rf"({'|'.join(_ORDINAL_WORD)})\Z")
_THREE_DIGITS_WORD = re.compile(r"(\d)(\d)(\d)(?=\D*\Z)")
_TWO_DIGITS_WORD = re.compile(r"(\d)(\d)(?=\D*\Z)")
_ONE_DIGIT_WORD = re.compile(r"(\d)(?=\D*\Z)")
_COMMA_WORD = re.compile(r", (\S+)\s+\Z")


def _mill(index: int) -> str:
    if index >= len(_MILL):
        raise ValueError("GPT-SoVITS English: a number past the decillions cannot be read (inflect's limit)")
    return _MILL[index]


def _tens(tens: int, units: int, mindex: int = 0) -> str:
    if tens != 1:
        return f"{_TEN[tens]}{'-' if tens and units else ''}{_UNIT[units]}{_mill(mindex)}"
    return f"{_TEEN[units]}{_mill(mindex)}"


def _zero_group(tens: int, units: int, zero: str) -> str:
    """inflect's group2sub: one two-digit group, a leading zero read as `zero`."""
    if tens:
        return f"{_tens(tens, units)}, "
    if units:
        return f" {zero} {_UNIT[units]}, "
    return f" {zero} {zero}, "


def _enword(num: str, andword: str, group: int, zero: str) -> str:
    """inflect's enword for group 0 (plain) and group 2 (pairs from the right)."""
    if group == 2:
        head = (len(num) - 1) % 2 + 1
        parts = [num[:head]] + [num[i:i + 2] for i in range(head, len(num), 2)]
        return "".join(f"{_UNIT[int(p)]}, " if len(p) == 1 and int(p) else f" {zero}, " if len(p) == 1
                       else _zero_group(int(p[0]), int(p[1]), zero) for p in parts)
    if int(num) == 0:
        return zero
    if int(num) == 1:
        return "one"
    num = num.lstrip().lstrip("0")
    mill_count = 0

    def hundreds(m: re.Match) -> str:
        nonlocal mill_count
        h, t, u = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if h:
            word = f"{_UNIT[h]} hundred{f' {andword} ' if t or u else ''}{_tens(t, u)}{_mill(mill_count)}, "
        elif t or u:
            word = f"{_tens(t, u)}{_mill(mill_count)}, "
        else:
            word = ""
        mill_count += 1
        return word

    while _THREE_DIGITS_WORD.search(num):
        num = _THREE_DIGITS_WORD.sub(hundreds, num, 1)
    num = _TWO_DIGITS_WORD.sub(lambda m: f"{_tens(int(m.group(1)), int(m.group(2)), mill_count)}, ", num, 1)
    return _ONE_DIGIT_WORD.sub(lambda m: f"{_UNIT[int(m.group(1))]}{_mill(mill_count)}, ", num, 1)


def _sub_ord(words: str) -> str:
    new = _ORDINAL_SUFFIX.sub(lambda m: _ORDINAL_WORD[m.group(1)], words)
    return new + "th" * (new == words)


def number_to_words(num: int | str, andword: str = "and", zero: str = "zero", group: int = 0) -> str:
    """inflect's `number_to_words` for a non-negative integer or digits + st/nd/rd/th (all upstream passes)."""
    text = str(num)
    ordinal = text[-2:] in ("st", "nd", "rd", "th")
    if ordinal:
        text = text[:-2]
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"GPT-SoVITS English: cannot read {num!r} as a number")
    chunk = _enword(text, andword, group, zero)
    if chunk[-2:] == ", ":
        chunk = chunk[:-2]
    chunk = re.sub(r"\s+,", ",", chunk)
    if group == 0:
        chunk = re.sub(r"\s+,", ",", _COMMA_WORD.sub(f" {andword} \\1", chunk))
    chunk = re.sub(r"\s+", " ", chunk).strip()
    parts = chunk.split(", ")
    if ordinal:
        parts[-1] = _sub_ord(parts[-1])
    return ", ".join(parts)


def ordinal(num: str) -> str:
    """inflect's `ordinal`: digits get their suffix ("21" -> "21st"), words their ordinal form."""
    if re.match(r"\d", num):
        n = int(num)
        return f"{num}{_NTH.get(n % 100, _NTH[n % 10])}"
    return _sub_ord(num)


# ---- expend.py ------------------------------------------------------------------------------------------
MEASUREMENTS = {"m": ("meter", "meters"), "km": ("kilometer", "kilometers"),
                "km/h": ("kilometer per hour", "kilometers per hour"), "ft": ("feet", "feet"),
                "L": ("liter", "liters"), "tbsp": ("tablespoon", "tablespoons"), "tsp": ("teaspoon", "teaspoons"),
                "h": ("hour", "hours"), "min": ("minute", "minutes"), "s": ("second", "seconds"),
                "°C": ("degree celsius", "degrees celsius"), "°F": ("degree fahrenheit", "degrees fahrenheit")}
_ORDINAL_NUMBER = re.compile(r"\b([0-9]+)\. ")
_COMMA_NUMBER = re.compile(r"([0-9][0-9\,]+[0-9])")
_TIME = re.compile(r"\b([01]?[0-9]|2[0-3]):([0-5][0-9])\b")
_MEASUREMENT = re.compile(r"\b([0-9]+(\.[0-9]+)?(m|km|km/h|ft|L|tbsp|tsp|h|min|s|°C|°F))\b")
_POUNDS_START = re.compile(r"£([0-9\.\,]*[0-9]+)")
_POUNDS_END = re.compile(r"([0-9\.\,]*[0-9]+)£")
_DOLLARS_START = re.compile(r"\$([0-9\.\,]*[0-9]+)")
_DOLLARS_END = re.compile(r"([(0-9\.\,]*[0-9]+)\$")      # upstream's class holds "(" (an int() of "(5" fails)
_DECIMAL = re.compile(r"([0-9]+\.\s*[0-9]+)")
_FRACTION = re.compile(r"([0-9]+/[0-9]+)")
_ORDINAL = re.compile(r"[0-9]+(st|nd|rd|th)")
_NUMBER = re.compile(r"[0-9]+")
_POWERS = "[⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ]*"
_OPERAND = rf"((-?)((\d+)(\.\d+)?{_POWERS})|(\.\d+{_POWERS})|([A-Za-z]{_POWERS}))"
_ARITHMETIC = re.compile(rf"{_OPERAND}\s+([\+\-×÷=])\s+{_OPERAND}")
_OPERATORS = {"+": " plus ", "-": " minus ", "×": " times ", "÷": " divided by ", "=": " Equals "}
_NEGATIVE = re.compile(r"(?:^|\s+)(-)(\d+)")


def _int(text: str, what: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"GPT-SoVITS English: cannot read the {what} {text!r} (write the amount as digits)")
    return int(text)


def _time(m: re.Match) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    period = "a.m." if hours < 12 else "p.m."
    if hours > 12:
        hours -= 12
    if minutes == 0:
        return f"{number_to_words(hours)} o'clock {period}"
    return f"{number_to_words(hours)} {number_to_words(minutes)} {period}"


def _measurement(m: re.Match) -> str:
    sign = m.group(3)
    num = int(m.group(1).replace(sign, "").replace(".", ""))      # upstream's: "1.0" counts as plural too
    plural = not (m.group(2) is None and num == 1)
    return m.group(1).replace(sign, " " + MEASUREMENTS[sign][plural])


def _money(units: tuple[str, str, str, str], m: re.Match) -> str:
    """_expand_pounds / _expand_dollars: "5 dollars and 99 cents" (the digits read later)."""
    one, many, sub_one, sub_many = units
    match = m.group(1)
    parts = match.split(".")
    if len(parts) > 2:
        return f"{match} {many}"
    whole = _int(parts[0], "amount") if parts[0] else 0
    cents = _int(parts[1].ljust(2, "0"), "amount") if len(parts) > 1 and parts[1] else 0
    whole_text = f"{whole} {one if whole == 1 else many}"
    cents_text = f"{cents} {sub_one if cents == 1 else sub_many}"
    if whole and cents:
        return f"{whole_text} and {cents_text}"
    return whole_text if whole else cents_text if cents else f"zero {many}"


_POUNDS = ("pound", "pounds", "penny", "pence")
_DOLLARS = ("dollar", "dollars", "cent", "cents")


def _decimal(m: re.Match) -> str:
    whole, fraction = m.group(1).split(".")
    return whole + " point " + " ".join(fraction)


def _fraction(m: re.Match) -> str:
    numerator, denominator = map(int, m.group(0).split("/"))
    head = number_to_words(numerator)
    if denominator == 2:
        return f"{head} {'half' if numerator == 1 else 'halves'}"
    if denominator == 1:
        return head
    return f"{head} {ordinal(number_to_words(denominator))}{'s' if numerator > 1 else ''}"


def _number(m: re.Match) -> str:
    num = int(m.group(0))
    if 1000 < num < 3000:
        if num == 2000:
            return "two thousand"
        if 2000 < num < 2010:
            return "two thousand " + number_to_words(num % 100)
        if num % 100 == 0:
            return number_to_words(num // 100) + " hundred"
        return number_to_words(num, andword="", zero="oh", group=2).replace(", ", " ")
    return number_to_words(num, andword="")


def normalize(text: str) -> str:
    """expend.normalize."""
    text = _ORDINAL_NUMBER.sub(lambda m: ordinal(m.group(1)) + ", ", text)
    while _ARITHMETIC.search(text):
        text = _ARITHMETIC.sub(lambda m: m.group(1) + _OPERATORS[m.group(8)] + m.group(9), text)
    text = _NEGATIVE.sub(lambda m: f"negative {m.group(2)}", text)
    text = _COMMA_NUMBER.sub(lambda m: m.group(1).replace(",", ""), text)
    text = _TIME.sub(_time, text)
    text = _MEASUREMENT.sub(_measurement, text)
    text = _POUNDS_START.sub(lambda m: _money(_POUNDS, m), text)
    text = _POUNDS_END.sub(lambda m: _money(_POUNDS, m), text)
    text = _DOLLARS_START.sub(lambda m: _money(_DOLLARS, m), text)
    text = _DOLLARS_END.sub(lambda m: _money(_DOLLARS, m), text)
    text = _DECIMAL.sub(_decimal, text)
    text = _FRACTION.sub(_fraction, text)
    text = _ORDINAL.sub(lambda m: number_to_words(m.group(0)), text)
    text = _NUMBER.sub(_number, text)
    text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    text = text.replace("%", " percent")
    text = re.sub(r"[^ A-Za-z'.,?!\-]", "", text)
    text = re.sub(r"(?i)i\.e\.", "that is", text)
    text = re.sub(r"(?i)e\.g\.", "for example", text)
    return re.sub(r"(?<!^)(?<![\s])([A-Z])", r" \1", text)
