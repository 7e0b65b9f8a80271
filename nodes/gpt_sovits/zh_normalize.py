"""Chinese text normalisation as GPT-SoVITS runs it before Chinese G2P: upstream's `text/zh_normalization/`
(PaddleSpeech's TextNormalizer, Apache-2.0) in one file.

`normalize(text)` splits text into sentences at Chinese/ASCII clause punctuation, then rewrites each sentence
so that it reads aloud in characters: traditional -> simplified, full-width letters/digits -> ASCII, then
dates, times, "~" ranges with units, temperatures, units of measure, arithmetic, powers, fractions,
percentages, mobile / landline / 400 numbers, number ranges, negative integers, version numbers, decimals,
numbers before measure words, digit strings, all other numbers, and finally symbols (① α + / ...). The rules
run in upstream's order, which matters: each one sees what the earlier ones left. Upstream's quirks are kept
on purpose (they are what the released models were trained and tested with), e.g. units are replaced as
plain substrings ("s" in an English word becomes 秒), 摄氏度 is read 度, "-0.5" is read 负零零点五, and the
end of a time range reads 半 when its *start* is at half past.
"""
from __future__ import annotations

import re

from .zh_chars import traditional_to_simplified

# --- numbers -> characters ---------------------------------------------------------------------------------

DIGITS = dict(zip("0123456789", "零一二三四五六七八九"))
UNITS = {1: "十", 2: "百", 3: "千", 4: "万", 8: "亿"}  # power of ten -> unit


def _cardinal_symbols(digits: str, use_zero: bool = True) -> list[str]:
    """"1203" -> [一, 千, 二, 百, 零, 三]: split at the largest unit shorter than the number, recurse."""
    stripped = digits.lstrip("0")
    if not stripped:
        return []
    if len(stripped) == 1:
        if use_zero and len(stripped) < len(digits):
            return [DIGITS["0"], DIGITS[stripped]]
        return [DIGITS[stripped]]
    power = max(p for p in UNITS if p < len(stripped))
    return _cardinal_symbols(digits[:-power]) + [UNITS[power]] + _cardinal_symbols(digits[-power:])


def verbalize_cardinal(digits: str) -> str:
    """"120" -> 一百二十, "0" -> 零, "15" -> 十五 (a leading 一十 is said 十), "" -> ""."""
    if not digits:
        return ""
    digits = digits.lstrip("0")
    if not digits:
        return DIGITS["0"]
    symbols = _cardinal_symbols(digits)
    if len(symbols) >= 2 and symbols[0] == DIGITS["1"] and symbols[1] == UNITS[1]:
        symbols = symbols[1:]
    return "".join(symbols)


def verbalize_digit(digits: str, alt_one: bool = False) -> str:
    """Digit by digit: "110" -> 一一零, or 幺幺零 with `alt_one` (phone numbers, codes)."""
    result = "".join(DIGITS[d] for d in digits)
    return result.replace("一", "幺") if alt_one else result


def num2str(number: str) -> str:
    """"3.20" -> 三点二零, ".5" -> 零点五, "12" -> 十二 (trailing zeros of the decimals collapse to one)."""
    integer, _, decimal = number.partition(".")
    result = verbalize_cardinal(integer)
    decimal = decimal.rstrip("0") + "0" if decimal.endswith("0") else decimal
    if decimal:
        result = (result or "零") + "点" + verbalize_digit(decimal)
    return result


# --- sentences ---------------------------------------------------------------------------------------------

SENTENCE_END = re.compile(r"([：、，；。？！,;?!][”’]?)")          # a sentence ends after these (and a closing quote)
SPLIT_DROPPED = re.compile(r"[——《》【】<>{}()（）#&@“”^_|\\]")
# Full-width letters and digits -> ASCII. Upstream also "translates" U+3000 with a table keyed by a str,
# which str.translate never matches: the ideographic space stays.
FULL_TO_HALF = {ord(c) + 0xFEE0: ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"}


def split_sentences(text: str) -> list[str]:
    text = SPLIT_DROPPED.sub("", text.replace(" ", ""))
    text = SENTENCE_END.sub(r"\1\n", text).strip()
    return [sentence.strip() for sentence in re.split(r"\n+", text)]


# --- dates and times ---------------------------------------------------------------------------------------

RE_DATE = re.compile(r"(\d{4}|\d{2})年((0?[1-9]|1[0-2])月)?(((0?[1-9])|((1|2)[0-9])|30|31)([日号]))?")  # 2024年3月1日
RE_DATE2 = re.compile(r"(\d{4})([- /.])(0[1-9]|1[012])\2(0[1-9]|[12][0-9]|3[01])")         # 2024-03-01, 2024/03/01
_CLOCK = r"([0-1]?[0-9]|2[0-3]):([0-5][0-9])(:([0-5][0-9]))?"
RE_TIME_RANGE = re.compile(_CLOCK + r"(~|-)" + _CLOCK)                                       # 8:30-12:30
RE_TIME = re.compile(_CLOCK)                                                                 # 12:30:45


def replace_date(m: re.Match) -> str:
    result = f"{verbalize_digit(m.group(1))}年"
    if m.group(3):
        result += f"{verbalize_cardinal(m.group(3))}月"
    if m.group(5):
        result += f"{verbalize_cardinal(m.group(5))}{m.group(9)}"
    return result


def replace_date2(m: re.Match) -> str:
    return f"{verbalize_digit(m.group(1))}年{verbalize_cardinal(m.group(3))}月{verbalize_cardinal(m.group(4))}日"


def _time_num2str(digits: str) -> str:
    """Minutes and seconds keep a leading zero: "05" -> 零五."""
    result = num2str(digits.lstrip("0"))
    return DIGITS["0"] + result if digits.startswith("0") else result


def _clock(hour: str, minute: str, second: str | None, half: bool) -> str:
    result = f"{num2str(hour)}点"
    if minute.lstrip("0"):
        result += "半" if half else f"{_time_num2str(minute)}分"
    if second and second.lstrip("0"):
        result += f"{_time_num2str(second)}秒"
    return result


def replace_time(m: re.Match) -> str:
    return _clock(m.group(1), m.group(2), m.group(4), int(m.group(2)) == 30)


def replace_time_range(m: re.Match) -> str:
    half = int(m.group(2)) == 30  # upstream tests the first minute for both ends
    return _clock(m.group(1), m.group(2), m.group(4), half) + "至" + _clock(m.group(6), m.group(7), m.group(9), half)


# --- "~" ranges with a unit, temperatures, units -----------------------------------------------------------

_NUMBER = r"((-?)((\d+)(\.\d+)?)|(\.(\d+)))"
_RANGE_UNIT = r"(%|°C|℃|度|摄氏度|cm2|cm²|cm3|cm³|cm|db|ds|kg|km|m2|m²|m³|m3|ml|m|mm|s)"
RE_TO_RANGE = re.compile(_NUMBER + _RANGE_UNIT + "[~]" + _NUMBER + _RANGE_UNIT)              # 10kg~20kg: ~ -> 至
RE_TEMPERATURE = re.compile(r"(-?)(\d+(\.\d+)?)(°C|℃|度|摄氏度)")                             # -3°C -> 零下三度
MEASURES = {  # replaced in this order, as plain substrings anywhere in the sentence
    "cm2": "平方厘米", "cm²": "平方厘米", "cm3": "立方厘米", "cm³": "立方厘米", "cm": "厘米", "db": "分贝",
    "ds": "毫秒", "kg": "千克", "km": "千米", "m2": "平方米", "m²": "平方米", "m³": "立方米", "m3": "立方米",
    "ml": "毫升", "m": "米", "mm": "毫米", "s": "秒",
}


def replace_to_range(m: re.Match) -> str:
    return m.group(0).replace("~", "至")


def replace_temperature(m: re.Match) -> str:
    # Upstream picks 摄氏度 or 度 by the decimals' group (its group 3), never "摄氏度": every unit reads 度.
    sign = "零下" if m.group(1) else ""
    return f"{sign}{num2str(m.group(2))}度"


def replace_measure(sentence: str) -> str:
    for notation, name in MEASURES.items():
        sentence = sentence.replace(notation, name)
    return sentence


# --- arithmetic and powers ---------------------------------------------------------------------------------

_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ"
_OPERAND = rf"((-?)((\d+)(\.\d+)?[{_SUPERSCRIPTS}]*)|(\.\d+[{_SUPERSCRIPTS}]*)|([A-Za-z][{_SUPERSCRIPTS}]*))"
RE_ASMD = re.compile(_OPERAND + r"([\+\-\×÷=])" + _OPERAND)                                   # 1+1=2, x²-y
OPERATORS = {"+": "加", "-": "减", "×": "乘", "÷": "除", "=": "等于"}
RE_POWER = re.compile(f"[{_SUPERSCRIPTS}]+")                                                 # x² -> x的2次方
POWERS = dict(zip(_SUPERSCRIPTS, "0123456789xyn"))


def replace_asmd(m: re.Match) -> str:
    return m.group(1) + OPERATORS[m.group(8)] + m.group(9)


def replace_power(m: re.Match) -> str:
    return "的" + "".join(POWERS[c] for c in m.group(0)) + "次方"


# --- fractions, percentages, phone numbers -----------------------------------------------------------------

RE_FRAC = re.compile(r"(-?)(\d+)/(\d+)")                                                     # 1/3 -> 三分之一
RE_PERCENTAGE = re.compile(r"(-?)(\d+(\.\d+)?)%")                                            # 95% -> 百分之九十五
# China's mobile prefixes (13x, 15x, 17x, 18x, 19x), optionally +86
RE_MOBILE_PHONE = re.compile(r"(?<!\d)((\+?86 ?)?1([38]\d|5[0-35-9]|7[678]|9[89])\d{8})(?!\d)")
RE_TELEPHONE = re.compile(r"(?<!\d)((0(10|2[1-3]|[3-9]\d{2})-?)?[1-9]\d{6,7})(?!\d)")          # 010-12345678
RE_NATIONAL_UNIFORM_NUMBER = re.compile(r"(400)(-)?\d{3}(-)?\d{4}")                           # 400-123-4567


def replace_frac(m: re.Match) -> str:
    sign = "负" if m.group(1) else ""
    return f"{sign}{num2str(m.group(3))}分之{num2str(m.group(2))}"


def replace_percentage(m: re.Match) -> str:
    sign = "负" if m.group(1) else ""
    return f"{sign}百分之{num2str(m.group(2))}"


def replace_mobile(m: re.Match) -> str:
    """Digit by digit with 幺, a pause (，) where the text has a space: "+86 138..." -> 八六，幺三八..."""
    return "，".join(verbalize_digit(part, alt_one=True) for part in m.group(0).strip("+").split())


def replace_phone(m: re.Match) -> str:
    return "，".join(verbalize_digit(part, alt_one=True) for part in m.group(0).split("-"))


# --- other numbers -----------------------------------------------------------------------------------------

# Number ranges 3-5, -1~2 (not inside arithmetic: no digit or operator on either side) -> 三到五
RE_RANGE = re.compile(r"(?<![\d\+\-\×÷=])((-?)((\d+)(\.\d+)?))[-~]((-?)((\d+)(\.\d+)?))(?![\d\+\-\×÷=])")
RE_INTEGER = re.compile(r"(-)(\d+)")                                                         # -10 -> 负十
RE_VERSION_NUM = re.compile(r"((\d+)(\.\d+)(\.\d+)?(\.\d+)+)")                                # 1.2.3 -> 一点二点三
RE_DECIMAL_NUM = re.compile(r"(-?)((\d+)(\.\d+))|(\.(\d+))")                                  # 0.5, .5
# Measure words after a number (upstream's list, in its order, duplicates included); 2 before them is 两
COM_QUANTIFIERS = (
    "(处|台|架|枚|趟|幅|平|方|堵|间|床|株|批|项|例|列|篇|栋|注|亩|封|艘|把|目|套|段|人|所|朵|匹|张|座|回|场|尾|条|个|首|阙|阵|网|"
    "炮|顶|丘|棵|只|支|袭|辆|挑|担|颗|壳|窠|曲|墙|群|腔|砣|座|客|贯|扎|捆|刀|令|打|手|罗|坡|山|岭|江|溪|钟|队|单|双|对|出|口|头|"
    "脚|板|跳|枝|件|贴|针|线|管|名|位|身|堂|课|本|页|家|户|层|丝|毫|厘|分|钱|两|斤|担|铢|石|钧|锱|忽|(千|毫|微)克|毫|厘|(公)分|"
    "分|寸|尺|丈|里|寻|常|铺|程|(千|分|厘|毫|微)米|米|撮|勺|合|升|斗|石|盘|碗|碟|叠|桶|笼|盆|盒|杯|钟|斛|锅|簋|篮|盘|桶|罐|瓶|壶|"
    "卮|盏|箩|箱|煲|啖|袋|钵|年|月|日|季|刻|时|周|天|秒|分|小时|旬|纪|岁|世|更|夜|春|夏|秋|冬|代|伏|辈|丸|泡|粒|颗|幢|堆|条|根|支|"
    "道|面|片|张|颗|块|元|(亿|千万|百万|万|千|百)|(亿|千万|百万|万|千|百|美|)元|(亿|千万|百万|万|千|百|十|)吨|(亿|千万|百万|万|千|百|)块|"
    "角|毛|分)"
)
RE_POSITIVE_QUANTIFIERS = re.compile(r"(\d+)([多余几\+])?" + COM_QUANTIFIERS)                  # 2个 -> 两个, 3+年 -> 三多年
RE_DEFAULT_NUM = re.compile(r"\d{3}\d*")                                                      # 00078 -> 零零零七八
RE_NUMBER = re.compile(r"(-?)((\d+)(\.\d+)?)|(\.(\d+))")


def replace_range(m: re.Match) -> str:
    return f"{RE_NUMBER.sub(replace_number, m.group(1))}到{RE_NUMBER.sub(replace_number, m.group(6))}"


def replace_negative_num(m: re.Match) -> str:
    return f"负{num2str(m.group(2))}"


def replace_version_num(m: re.Match) -> str:
    return "".join("点" if c == "." else num2str(c) for c in m.group(1))


def replace_number(m: re.Match) -> str:
    if m.group(5):                                   # ".5": no integer part
        return num2str(m.group(5))
    sign = "负" if m.group(1) else ""
    return f"{sign}{num2str(m.group(2))}"


def replace_positive_quantifier(m: re.Match) -> str:
    number = num2str(m.group(1))
    more = "多" if m.group(2) == "+" else m.group(2) or ""
    return f"{'两' if number == '二' else number}{more}{m.group(3)}"


def replace_default_num(m: re.Match) -> str:
    return verbalize_digit(m.group(0), alt_one=True)


# --- symbols left at the end -------------------------------------------------------------------------------

SYMBOLS = str.maketrans({
    "/": "每", "①": "一", "②": "二", "③": "三", "④": "四", "⑤": "五", "⑥": "六", "⑦": "七", "⑧": "八", "⑨": "九",
    "⑩": "十", "α": "阿尔法", "β": "贝塔", "γ": "伽玛", "Γ": "伽玛", "δ": "德尔塔", "Δ": "德尔塔", "ε": "艾普西龙",
    "ζ": "捷塔", "η": "依塔", "θ": "西塔", "Θ": "西塔", "ι": "艾欧塔", "κ": "喀帕", "λ": "拉姆达", "Λ": "拉姆达",
    "μ": "缪", "ν": "拗", "ξ": "克西", "Ξ": "克西", "ο": "欧米克伦", "π": "派", "Π": "派", "ρ": "肉", "ς": "西格玛",
    "Σ": "西格玛", "σ": "西格玛", "τ": "套", "υ": "宇普西龙", "φ": "服艾", "Φ": "服艾", "χ": "器", "ψ": "普赛",
    "Ψ": "普赛", "ω": "欧米伽", "Ω": "欧米伽",
    "+": "加", "-": "减", "×": "乘", "÷": "除", "=": "等",  # arithmetic the rules above did not read
})
POST_DROPPED = re.compile(r"[-——《》【】<=>{}()（）#&@“”^_|\\]")


# --- the pipeline ------------------------------------------------------------------------------------------

def normalize_sentence(sentence: str) -> str:
    sentence = traditional_to_simplified(sentence).translate(FULL_TO_HALF)
    sentence = RE_DATE.sub(replace_date, sentence)
    sentence = RE_DATE2.sub(replace_date2, sentence)
    sentence = RE_TIME_RANGE.sub(replace_time_range, sentence)   # ranges before single times
    sentence = RE_TIME.sub(replace_time, sentence)
    sentence = RE_TO_RANGE.sub(replace_to_range, sentence)
    sentence = RE_TEMPERATURE.sub(replace_temperature, sentence)
    sentence = replace_measure(sentence)
    while RE_ASMD.search(sentence):                              # 1+2+3: each pass reads every other operator
        sentence = RE_ASMD.sub(replace_asmd, sentence)
    sentence = RE_POWER.sub(replace_power, sentence)
    sentence = RE_FRAC.sub(replace_frac, sentence)
    sentence = RE_PERCENTAGE.sub(replace_percentage, sentence)
    sentence = RE_MOBILE_PHONE.sub(replace_mobile, sentence)
    sentence = RE_TELEPHONE.sub(replace_phone, sentence)
    sentence = RE_NATIONAL_UNIFORM_NUMBER.sub(replace_phone, sentence)
    sentence = RE_RANGE.sub(replace_range, sentence)
    sentence = RE_INTEGER.sub(replace_negative_num, sentence)
    sentence = RE_VERSION_NUM.sub(replace_version_num, sentence)
    sentence = RE_DECIMAL_NUM.sub(replace_number, sentence)
    sentence = RE_POSITIVE_QUANTIFIERS.sub(replace_positive_quantifier, sentence)
    sentence = RE_DEFAULT_NUM.sub(replace_default_num, sentence)
    sentence = RE_NUMBER.sub(replace_number, sentence)
    return POST_DROPPED.sub("", sentence.translate(SYMBOLS))


def normalize(text: str) -> list[str]:
    """Text -> normalised sentences (upstream `TextNormalizer().normalize(text)`)."""
    return [normalize_sentence(sentence) for sentence in split_sentences(text)]
