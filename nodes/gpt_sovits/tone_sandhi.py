"""Mandarin tone sandhi on a jieba segmentation, as GPT-SoVITS's `text/tone_sandhi.py` (PaddleSpeech's
ToneSandhi, Apache-2.0) applies it before pinyin finals become phones.

`pre_merge_for_modify(seg)` re-groups jieba's (word, part-of-speech) pairs so sandhi sees whole units (不/一
with the next word, 听一听, reduplications, runs of third tones, 儿), then `modified_tone(word, pos, finals)`
rewrites one word's tone-numbered finals ("ao3"; 5 = neutral): 不 and 一 sandhi, neutral tones, third-tone
sandhi. Upstream splits words with `jieba_fast.cut_for_search`; jieba is the same algorithm and dictionary
in pure Python. Neither function mutates its arguments (upstream edits `finals` in place and returns it).
"""
from __future__ import annotations

import jieba
from pypinyin import Style, lazy_pinyin

# Upstream's word lists (tone_sandhi.py, PaddleSpeech).
MUST_NEUTRAL = frozenset((
    "麻烦 麻利 鸳鸯 高粱 骨头 骆驼 马虎 首饰 馒头 馄饨 风筝 难为 队伍 阔气 闺女 门道 锄头 "
    "铺盖 铃铛 铁匠 钥匙 里脊 里头 部分 那么 道士 造化 迷糊 连累 这么 这个 运气 过去 软和 "
    "转悠 踏实 跳蚤 跟头 趔趄 财主 豆腐 讲究 记性 记号 认识 规矩 见识 裁缝 补丁 衣裳 衣服 "
    "衙门 街坊 行李 行当 蛤蟆 蘑菇 薄荷 葫芦 葡萄 萝卜 荸荠 苗条 苗头 苍蝇 芝麻 舒服 舒坦 "
    "舌头 自在 膏药 脾气 脑袋 脊梁 能耐 胳膊 胭脂 胡萝 胡琴 胡同 聪明 耽误 耽搁 耷拉 耳朵 "
    "老爷 老实 老婆 老头 老太 翻腾 罗嗦 罐头 编辑 结实 红火 累赘 糨糊 糊涂 精神 粮食 簸箕 "
    "篱笆 算计 算盘 答应 笤帚 笑语 笑话 窟窿 窝囊 窗户 稳当 稀罕 称呼 秧歌 秀气 秀才 福气 "
    "祖宗 砚台 码头 石榴 石头 石匠 知识 眼睛 眯缝 眨巴 眉毛 相声 盘算 白净 痢疾 痛快 疟疾 "
    "疙瘩 疏忽 畜生 生意 甘蔗 琵琶 琢磨 琉璃 玻璃 玫瑰 玄乎 狐狸 状元 特务 牲口 牙碜 牌楼 "
    "爽快 爱人 热闹 烧饼 烟筒 烂糊 点心 炊帚 灯笼 火候 漂亮 滑溜 溜达 温和 清楚 消息 浪头 "
    "活泼 比方 正经 欺负 模糊 槟榔 棺材 棒槌 棉花 核桃 栅栏 柴火 架势 枕头 枇杷 机灵 本事 "
    "木头 木匠 朋友 月饼 月亮 暖和 明白 时候 新鲜 故事 收拾 收成 提防 挖苦 挑剔 指甲 指头 "
    "拾掇 拳头 拨弄 招牌 招呼 抬举 护士 折腾 扫帚 打量 打算 打点 打扮 打听 打发 扎实 扁担 "
    "戒指 懒得 意识 意思 情形 悟性 怪物 思量 怎么 念头 念叨 快活 忙活 志气 心思 得罪 张罗 "
    "弟兄 开通 应酬 庄稼 干事 帮手 帐篷 希罕 师父 师傅 巴结 巴掌 差事 工夫 岁数 屁股 尾巴 "
    "少爷 小气 小伙 将就 对头 对付 寡妇 家伙 客气 实在 官司 学问 学生 字号 嫁妆 媳妇 媒人 "
    "婆家 娘家 委屈 姑娘 姐夫 妯娌 妥当 妖精 奴才 女婿 头发 太阳 大爷 大方 大意 大夫 多少 "
    "多么 外甥 壮实 地道 地方 在乎 困难 嘴巴 嘱咐 嘟囔 嘀咕 喜欢 喇嘛 喇叭 商量 唾沫 哑巴 "
    "哈欠 哆嗦 咳嗽 和尚 告诉 告示 含糊 吓唬 后头 名字 名堂 合同 吆喝 叫唤 口袋 厚道 厉害 "
    "千斤 包袱 包涵 匀称 勤快 动静 动弹 功夫 力气 前头 刺猬 刺激 别扭 利落 利索 利害 分析 "
    "出息 凑合 凉快 冷战 冤枉 冒失 养活 关系 先生 兄弟 便宜 使唤 佩服 作坊 体面 位置 似的 "
    "伙计 休息 什么 人家 亲戚 亲家 交情 云彩 事情 买卖 主意 丫头 丧气 两口 东西 东家 世故 "
    "不由 不在 下水 下巴 上头 上司 丈夫 丈人 一辈 那个 菩萨 父亲 母亲 咕噜 邋遢 费用 冤家 "
    "甜头 介绍 荒唐 大人 泥鳅 幸福 熟悉 计划 扑腾 蜡烛 姥爷 照顾 喉咙 吉他 弄堂 蚂蚱 凤凰 "
    "拖沓 寒碜 糟蹋 倒腾 报复 逻辑 盘缠 喽啰 牢骚 咖喱 扫把 惦记"
).split())
MUST_NOT_NEUTRAL = frozenset((
    "男子 女子 分子 原子 量子 莲子 石子 瓜子 电子 人人 虎虎 幺幺 干嘛 学子 哈哈 数数 袅袅 "
    "局地 以下 娃哈哈 花花草草 留得 耕地 想想 熙熙 攘攘 卵子 死死 冉冉 恳恳 佼佼 吵吵 打打 "
    "考考 整整 莘莘 落地 算子 家家户户 青青"
).split())
PUNCTUATION = "：，；。？！“”‘’':,;.?!"


def _tone(final: str, tone: str) -> str:
    return final[:-1] + tone


def _all_tone_three(finals: list[str]) -> bool:
    return all(f[-1] == "3" for f in finals)


def _is_reduplication(word: str) -> bool:
    return len(word) == 2 and word[0] == word[1]


def _split_word(word: str) -> list[str]:
    """Two parts: the shortest search-mode jieba piece and the rest, in word order (either may be "")."""
    first = sorted(jieba.cut_for_search(word), key=len)[0]
    if word.find(first) == 0:
        return [first, word[len(first):]]
    return [word[:-len(first)], first]


def _bu_sandhi(word: str, finals: list[str]) -> list[str]:
    if len(word) == 3 and word[1] == "不":                       # 看不懂: bu5
        finals[1] = _tone(finals[1], "5")
    else:
        for i, char in enumerate(word):                         # 不怕: bu2 before a fourth tone
            if char == "不" and i + 1 < len(word) and finals[i + 1][-1] == "4":
                finals[i] = _tone(finals[i], "2")
    return finals


def _yi_sandhi(word: str, finals: list[str]) -> list[str]:
    # str.isnumeric() is true for 二, 三, ... too: 一 inside a number (一零零, 二一零, or 一 alone) stays as is
    if word.find("一") != -1 and all(c.isnumeric() for c in word if c != "一"):
        return finals
    if len(word) == 3 and word[1] == "一" and word[0] == word[-1]:   # 看一看: yi5
        finals[1] = _tone(finals[1], "5")
    elif word.startswith("第一"):                                   # ordinal: yi1
        finals[1] = _tone(finals[1], "1")
    else:
        for i, char in enumerate(word):
            if char == "一" and i + 1 < len(word):
                if finals[i + 1][-1] == "4":                        # 一段: yi2
                    finals[i] = _tone(finals[i], "2")
                elif word[i + 1] not in PUNCTUATION:                # 一天: yi4 (before punctuation: yi1)
                    finals[i] = _tone(finals[i], "4")
    return finals


def _neutral_sandhi(word: str, pos: str, finals: list[str]) -> list[str]:
    # Reduplicated nouns, verbs, adjectives: 奶奶, 试试, 旺旺
    for j in range(1, len(word)):
        if word[j] == word[j - 1] and pos[0] in "nva" and word not in MUST_NOT_NEUTRAL:
            finals[j] = _tone(finals[j], "5")
    ge = word.find("个")
    if word and word[-1] in "吧呢哈啊呐噻嘛吖嗨呐哦哒额滴哩哟喽啰耶喔诶":
        finals[-1] = _tone(finals[-1], "5")
    elif word and word[-1] in "的地得":
        finals[-1] = _tone(finals[-1], "5")
    elif len(word) == 1 and word in "了着过" and pos in {"ul", "uz", "ug"}:        # 走了, 看着, 去过
        finals[-1] = _tone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "们子" and pos in {"r", "n"} and word not in MUST_NOT_NEUTRAL:
        finals[-1] = _tone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "上下里" and pos in {"s", "l", "f"}:        # 桌上, 地下, 家里
        finals[-1] = _tone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "来去" and word[-2] in "上下进出回过起开":    # 上来, 下去
        finals[-1] = _tone(finals[-1], "5")
    elif (ge >= 1 and (word[ge - 1].isnumeric() or word[ge - 1] in "几有两半多各整每做是")) or word == "个":
        finals[ge] = _tone(finals[ge], "5")                                      # 个 as a measure word
    elif word in MUST_NEUTRAL or word[-2:] in MUST_NEUTRAL:
        finals[-1] = _tone(finals[-1], "5")

    # The same list checked again on each half of the word
    parts = _split_word(word)
    halves = [finals[:len(parts[0])], finals[len(parts[0]):]]
    for part, half in zip(parts, halves):
        if part in MUST_NEUTRAL or part[-2:] in MUST_NEUTRAL:
            half[-1] = _tone(half[-1], "5")
    return halves[0] + halves[1]


def _three_sandhi(word: str, finals: list[str]) -> list[str]:
    if len(word) == 2 and _all_tone_three(finals):
        finals[0] = _tone(finals[0], "2")
    elif len(word) == 3:
        parts = _split_word(word)
        if _all_tone_three(finals):
            if len(parts[0]) == 2:                  # disyllable + monosyllable: 蒙古/包
                finals[0] = _tone(finals[0], "2")
                finals[1] = _tone(finals[1], "2")
            elif len(parts[0]) == 1:                # monosyllable + disyllable: 纸/老虎
                finals[1] = _tone(finals[1], "2")
        else:
            halves = [finals[:len(parts[0])], finals[len(parts[0]):]]
            for i, half in enumerate(halves):
                if _all_tone_three(half) and len(half) == 2:                    # 所有/人
                    half[0] = _tone(half[0], "2")
                elif i == 1 and not _all_tone_three(half) and half[0][-1] == "3" and halves[0][-1][-1] == "3":
                    halves[0][-1] = _tone(halves[0][-1], "2")                   # 好/喜欢
            finals = halves[0] + halves[1]
    elif len(word) == 4:                            # idioms: two words of two
        halves = [finals[:2], finals[2:]]
        for half in halves:
            if _all_tone_three(half):
                half[0] = _tone(half[0], "2")
        finals = halves[0] + halves[1]
    return finals


def _merge_bu(seg: list[list[str]]) -> list[list[str]]:
    """不 joins the word after it (jieba often leaves it alone); a trailing 不 stays, tagged "d"."""
    out, last = [], ""
    for word, pos in seg:
        if last == "不":
            word = last + word
        if word != "不":
            out.append([word, pos])
        last = word
    if last == "不":
        out.append([last, "d"])
    return out


def _merge_yi(seg: list[list[str]]) -> list[list[str]]:
    """Verb 一 verb -> one word (听一听); then a lone 一 joins the word after it."""
    out, i = [], 0
    while i < len(seg):
        word, pos = seg[i]
        if i >= 1 and word == "一" and i + 1 < len(seg):
            last, after = out[-1], seg[i + 1]
            if last[0] == after[0] and last[1] == "v" and after[1] == "v":
                out[-1] = [last[0] + "一" + after[0], last[1]]
                i += 2
                continue
        out.append([word, pos])
        i += 1
    merged: list[list[str]] = []
    for word, pos in out:
        if merged and merged[-1][0] == "一":
            merged[-1][0] += word
        else:
            merged.append([word, pos])
    return merged


def _merge_reduplication(seg: list[list[str]]) -> list[list[str]]:
    out: list[list[str]] = []
    for word, pos in seg:
        if out and word == out[-1][0]:
            out[-1][0] += word
        else:
            out.append([word, pos])
    return out


def _merge_three_tones(seg: list[list[str]], whole_words: bool) -> list[list[str]]:
    """Join a word to the previous one (three characters at most, never after a reduplication, never twice in
    a row) when both are all third tones (`whole_words`) or the previous ends and this one starts with one."""
    finals = [lazy_pinyin(word, neutral_tone_with_five=True, style=Style.FINALS_TONE3) for word, _ in seg]
    out: list[list[str]] = []
    merged_last = False
    for i, (word, pos) in enumerate(seg):
        if whole_words:
            threes = i >= 1 and _all_tone_three(finals[i - 1]) and _all_tone_three(finals[i])
        else:
            threes = i >= 1 and finals[i - 1][-1][-1] == "3" and finals[i][0][-1] == "3"
        merged_last = (threes and not merged_last and not _is_reduplication(seg[i - 1][0])
                       and len(seg[i - 1][0]) + len(word) <= 3)
        if merged_last:
            out[-1][0] += word
        else:
            out.append([word, pos])
    return out


def _merge_er(seg: list[list[str]]) -> list[list[str]]:
    out: list[list[str]] = []
    for i, (word, pos) in enumerate(seg):
        if i >= 1 and word == "儿" and seg[i - 1][0] != "#":
            out[-1][0] += word
        else:
            out.append([word, pos])
    return out


def pre_merge_for_modify(seg: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """jieba.posseg's (word, pos) pairs of one sentence -> the units tone sandhi works on."""
    merged = _merge_reduplication(_merge_yi(_merge_bu([list(p) for p in seg])))
    for whole_words in (True, False):
        try:
            merged = _merge_three_tones(merged, whole_words)
        except IndexError:  # a syllable without a final (嗯 -> ""): upstream catches it and keeps the segmentation
            pass
    return [(word, pos) for word, pos in _merge_er(merged)]


def modified_tone(word: str, pos: str, finals: list[str]) -> list[str]:
    """One unit's tone-numbered finals (one per character) after 不, 一, neutral-tone and third-tone sandhi."""
    finals = _bu_sandhi(word, list(finals))
    finals = _yi_sandhi(word, finals)
    finals = _neutral_sandhi(word, pos, finals)
    return _three_sandhi(word, finals)
