#!/usr/bin/python3
"""make_corpus: the text that `fusionc tokenize` is checked against the
JavaScript reference on, and timed on.

Writes a few hundred UTF-8 files of a few KB each into OUT_DIR (about
1.3 MB by default): English prose, C and Python code, text in many
scripts (Latin with diacritics precomposed and decomposed, Cyrillic,
Greek, Arabic, Hebrew, Devanagari, Thai, Chinese, Japanese, Korean),
emoji (ZWJ sequences, skin tones, flags, keycaps), numbers in many
digit sets, whitespace runs, control characters, contractions in mixed
case and apostrophe variants, mixtures of all of these, and a handful of
fixed files for the edge cases (literal special tokens, U+2581, an empty
file, long runs, Unicode normalization cases).

Deterministic: a fixed seed and no input but this file, so the same bytes
on every run and every machine (the code is generated, not taken from the
tree, so that editing the tree does not change the corpus).  It is not
meant to be natural text: it is meant to reach every branch of a
tokenizer's pre-tokenizer regex, normalizer and byte handling.

Characters kept out, on purpose:
  - anything not assigned in Unicode 14.0 (checked: this Python's
    unicodedata is 14.0.0; the C side's PCRE2 10.42 has Unicode 14
    tables, while Node 20's ICU is newer, so a character added later
    would be \\p{L} in one and not the other);
  - NUL;
  - U+0085 (NEXT LINE) and U+FEFF (BOM / ZWNBSP): JavaScript's \\s
    leaves out U+0085 and takes in U+FEFF, the opposite of Unicode's
    White_Space that Rust's and Oniguruma's \\s follow, so the reference
    would split them differently from Hugging Face's own tokenizers;
  - an apostrophe followed by U+017F (LATIN SMALL LETTER LONG S): the
    reference rewrites the case-insensitive contraction group
    (?i:'s|'t|...) as [sS], [tT], ..., which leaves out U+017F; a
    Unicode case-insensitive match (Oniguruma, PCRE2) takes it as 's.

Prints the number of files and the total bytes.
usage: make_corpus.py OUT_DIR [--bytes N]
"""
import argparse
import os
import random
import re
import sys
import unicodedata

SEED = 20240520
NAME_RE = re.compile(r"^\d{4}_[a-z0-9_]+\.txt$")  # the files this script writes (and replaces)

# ----------------------------------------------------------------------------
# Word lists and sample sentences

ENGLISH_WORDS = """
the of and to in is was for that with as on by at from it an be this which or are
have has had not but all were when there can more one been their if would about
into time only other its some could new these two may first then do any like my
now over such our man me even most made after also did many before must through
back years where much your way well down should because each just those people
how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us
great old year off come since against go came right used take three gradient
tensor device network model training loss step batch layer shard checkpoint
compiler kernel memory bandwidth latency throughput cluster node worker broker
optimizer weight bias activation attention token vocabulary sequence pipeline
river mountain garden window kitchen library morning evening winter summer
quickly slowly carefully quietly suddenly rather almost perhaps nevertheless
""".split()

PROPER_NOUNS = """Alice Bob Carol Dmitri Eve Fatima Gustav Hiroshi Ingrid Jamal
Kwame Lucía Mateo Nadia Oskar Priya Quentin Rosa Sven Tomasz Ursula Valentina
Wei Xavier Yasmin Zoltán London Paris Tokyo Nairobi Lima Oslo Berlin Mumbai
Toronto Seoul Cairo Reykjavík""".split()

SAMPLES = {
    "latin": [
        "Voix ambiguë d'un cœur qui, au zéphyr, préfère les jattes de kiwis.",
        "Le cœur déçu mais l'âme plutôt naïve, Louÿs rêva de crapaüter en canoë au delà des îles.",
        "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
        "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Tiếng Việt có nhiều dấu thanh: à, á, ả, ã, ạ; ằ, ắ, ẳ, ẵ, ặ; ề, ế, ể, ễ, ệ.",
        "Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
        "Kæmi ný öxi hér, ykist þjófum nú bæði víl og ádrepa.",
        "Pijamalı hasta yağız şoföre çabucak güvendi. İstanbul'da ılık bir gün.",
        "El pingüino Wenceslao hizo kilómetros bajo exhaustiva lluvia y frío, añoraba a su querido cachorro.",
        "¿Dónde está la estación? ¡Aquí mismo, señora!",
        "À noite, vovô Kowalsky vê o ímã cair no pé do pinguim queixoso e vovó põe açúcar no chá de tâmaras do jabuti feliz.",
        "Înjurând pițigăiat, zoofobul comandă vexat whisky și tequila.",
        "Árvíztűrő tükörfúrógép. Öt szép szűz lány őrült írót nyúz.",
        "Høj bly gom vandt fræk sexquiz på wc. Blåbærsyltetøy er godt.",
        "Ŝoseo ĉiuĵaŭde: eĥoŝanĝo ĉiuĵaŭde.",
        "Ḁ ḁ Ḃ ḃ Ẁ ẁ ẞ ǅ ǈ ǋ Ǳ ǲ ǳ ﬁ ﬂ ﬀ",
    ],
    "cyrillic": [
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "В чащах юга жил бы цитрус? Да, но фальшивый экземпляр!",
        "Широкая электрификация южных губерний даст мощный толчок подъёму сельского хозяйства.",
        "Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
        "Фијуче ветар у шибљу, леди пасаже и куће иза њих и гунђа у оџацима.",
        "Ах, чудна българска земьо, полюшвай цъфтящи жита.",
        "Мој хлеб је свеж. Љубав, њива, ђак, ћерка, џак.",
        "Распределённое обучение нейронных сетей требует быстрой связи между узлами.",
    ],
    "greek": [
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
        "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.",
        "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός.",
        "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν.",
        "Μῆνιν ἄειδε θεὰ Πηληϊάδεω Ἀχιλῆος οὐλομένην;",
        "Η εκπαίδευση του μοντέλου διήρκεσε τρεις ημέρες σε οκτώ κάρτες γραφικών.",
    ],
    "arabic": [
        "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق.",
        "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
        "صِفْ خَلْقَ خَوْدٍ كَمِثْلِ الشَّمْسِ إِذْ بَزَغَتْ",
        "هل تتحدث العربية؟ نعم، قليلاً. الرقم ١٢٣٤٥ والتاريخ ٢٠٢٤/٠٥/٢٠.",
        "كتـــــاب جميـــل، وقلم أحمر؛ والنموذج يتعلم من البيانات.",
        "خوشبختانه فارسی هم با حروف عربی نوشته می‌شود: ۱۲۳۴۵۶۷۸۹۰.",
    ],
    "hebrew": [
        "דג סקרן שט בים מאוכזב ולפתע מצא חברה.",
        "בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ.",
        "עטלף אבק נס דרך מזגן שהתפוצץ כי חם.",
        "שלום עולם! המודל אומן על 8 מעבדים גרפיים במשך 3 ימים.",
        "ז״ל, צה״ל, ת״א — גרשיים וגרש: ג׳ירפה.",
    ],
    "devanagari": [
        "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम, अयोध्या के महाराज दशरथ के बड़े सपुत्र थे।",
        "हिन्दी एक भाषा है। नमस्ते दुनिया! क्या हाल है?",
        "संस्कृतम् जगतः एकतमा अतिप्राचीना समृद्धा शास्त्रीया च भाषा अस्ति।",
        "क़लम, ख़ून, ग़ज़ल, ज़रूर, फ़ोन, ड़, ढ़ — नुक़्ता वाले अक्षर।",
        "मॉडल ने ०१२३४५६७८९ अंक सीखे; मराठी: महाराष्ट्रातील लोक मराठी बोलतात.",
    ],
    "thai": [
        "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
        "จงฝ่าฟันพัฒนาวิชาการ อย่าล้างผลาญฤๅเข่นฆ่าบีฑาใคร",
        "ไม่ถือโทษโกรธแช่งซัดฮึดฮัดด่า หัดอภัยเหมือนกีฬาอัชฌาสัย",
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ตัวเลขไทย ๑๒๓๔๕๖๗๘๙๐ ก็มี",
        "น้ำ ค่ำ ทำ จำ กำลัง สำคัญ",
    ],
    "chinese": [
        "我能吞下玻璃而不伤身体。",
        "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。",
        "机器学习模型的分布式训练需要高效的通信与可靠的检查点。",
        "繁體中文與簡體中文的差異在於字形，而非語法。",
        "他说：「你好！」她回答：『今天天气很好。』（括号）【方括号】《书名号》",
        "一、二、三；甲：乙？丙！……——",
        "𠀀𠀁𠀂 𪚥 𡃁 — 扩展B区的汉字需要四个字节。",
    ],
    "japanese": [
        "いろはにほへと ちりぬるを わかよたれそ つねならむ うゐのおくやま けふこえて あさきゆめみし ゑひもせす",
        "私はガラスを食べられます。それは私を傷つけません。",
        "東京都渋谷区でラーメンを食べました。とても美味しかったです！",
        "コンピューター、データベース、ネットワーク、サーバー。",
        "ｶﾀｶﾅ ﾃﾞｰﾀ ﾊﾝｶｸ — 半角カタカナも使われます。",
        "「吾輩は猫である。名前はまだ無い。」夏目漱石",
        "〒150-0001 東京都渋谷区神宮前１－２－３　ビル４階",
    ],
    "korean": [
        "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.",
        "다람쥐 헌 쳇바퀴에 타고파.",
        "안녕하세요, 세계! 오늘 날씨가 정말 좋네요.",
        "분산 학습은 여러 장치에서 모델을 동시에 훈련하는 방법입니다.",
        "한글은 1443년에 세종대왕이 만들었습니다. 훈민정음(訓民正音).",
    ],
}

# Character pools for random words, per script: (first, last) code point ranges.
POOLS = {
    "cyrillic": [(0x0430, 0x044F), (0x0410, 0x042F), (0x0450, 0x045F)],
    "greek": [(0x03B1, 0x03C9), (0x0391, 0x03A1), (0x03A3, 0x03A9), (0x1F00, 0x1F15)],
    "arabic": [(0x0627, 0x063A), (0x0641, 0x064A)],
    "hebrew": [(0x05D0, 0x05EA)],
    "devanagari": [(0x0915, 0x0939)],
    "thai": [(0x0E01, 0x0E2E)],
    "chinese": [(0x4E00, 0x9FA5)],
    "japanese": [(0x3041, 0x3093), (0x30A1, 0x30F6), (0x4E00, 0x9FA5)],
    "korean": [(0xAC00, 0xD7A3)],
}

EMOJI = ("😀 😂 🥰 🤔 🙈 🚀 🌍 🔥 ✨ 🎉 👍 👋 🍕 🐍 🦀 🧠 💡 ⚡ ☕ ✅ ❌ ⭐ 🌈 🎵 📦 "
         "🧪 🤖 👀 🙏 🐢 🍣 🎲 🧩 🛰 ☺ ♥ ✈").split()
EMOJI_SEQUENCES = [
    "❤️", "☺️", "✈️", "👍🏻", "👋🏽", "🙏🏿", "👩🏼", "🧑🏾", "🤝🏽",
    "👨‍👩‍👧‍👦", "👩‍💻", "🧑‍🔬", "👨🏽‍🍳", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️",
    "🧑🏻‍🤝‍🧑🏿", "❤️‍🔥", "😮‍💨", "👩‍❤️‍💋‍👨", "🐕‍🦺", "🧔🏻‍♀️",
    "🇫🇷", "🇩🇪", "🇯🇵", "🇰🇷", "🇧🇷", "🇮🇳", "🇺🇦", "🇪🇺", "🇺🇳", "🇦🇶",
    "🏴󠁧󠁢󠁥󠁮󠁧󠁿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "#️⃣", "1️⃣", "*️⃣", "🔟",
]
SYMBOLS = list("™©®→←↑↓⇒∑∫≤≥≠∞±×÷√∂∇─│┌┐└┘├┤€£¥₹₿§¶†‡•…‰′″")

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
APOSTROPHES = ["'", "\u2019", "\u2018", "\u02bc", "\u2032", "\uff07", "`", "\u00b4"]

# ----------------------------------------------------------------------------
# Generators: each takes the random source and a size in bytes and returns
# at least that many bytes of text (whole units, never cut mid-sequence).


def nbytes(s):
    return len(s.encode("utf-8"))


def fill(rng, size, unit):
    """Calls unit(rng) until the pieces add up to size bytes."""
    out, n = [], 0
    while n < size:
        piece = unit(rng)
        out.append(piece)
        n += nbytes(piece)
    return "".join(out)


def english_sentence(rng):
    n = rng.randint(4, 22)
    words = []
    for i in range(n):
        r = rng.random()
        if r < 0.06:
            words.append(rng.choice(PROPER_NOUNS))
        elif r < 0.10:
            words.append(str(rng.choice([rng.randint(0, 99), rng.randint(100, 99999), rng.randint(1900, 2030)])))
        elif r < 0.14:
            words.append(rng.choice(["don't", "it's", "we'll", "I'm", "they're", "you've", "she'd", "can't",
                                     "won't", "isn't", "o'clock", "rock'n'roll"]))
        else:
            words.append(rng.choice(ENGLISH_WORDS))
        if i < n - 1 and rng.random() < 0.08:
            words[-1] += rng.choice([",", ",", ";", ":", " —", " -"])
    s = " ".join(words)
    s = s[0].upper() + s[1:]
    r = rng.random()
    if r < 0.1:
        s = '"' + s + '," ' + rng.choice(PROPER_NOUNS) + " said."
    elif r < 0.15:
        s = s + " (" + " ".join(rng.choice(ENGLISH_WORDS) for _ in range(rng.randint(1, 5))) + ")."
    else:
        s += rng.choice([".", ".", ".", "?", "!", "...", "?!"])
    return s


def gen_prose(rng, size):
    def paragraph(rng):
        text = " ".join(english_sentence(rng) for _ in range(rng.randint(1, 7)))
        if rng.random() < 0.4:  # hard-wrapped at about 72 columns
            lines, line = [], ""
            for w in text.split(" "):
                if line and len(line) + 1 + len(w) > 72:
                    lines.append(line)
                    line = w
                else:
                    line = w if not line else line + " " + w
            lines.append(line)
            text = "\n".join(lines)
        return text + rng.choice(["\n\n", "\n\n", "\n", "\n\n\n"])
    return fill(rng, size, paragraph)


C_TYPES = ["int", "int64_t", "size_t", "float", "double", "uint8_t", "char *", "const char *", "struct tensor *",
           "void *", "bool"]
IDENT_PARTS = ["tensor", "graph", "node", "buf", "len", "count", "shape", "dim", "rank", "plan", "arena", "offset",
               "stride", "grad", "param", "step", "lr", "loss", "err", "dev", "peer", "msg", "out", "in", "tmp", "i",
               "j", "k", "n", "nbytes", "id", "op", "kind", "name", "path", "fd"]


def ident(rng, parts=(1, 3)):
    return "_".join(rng.choice(IDENT_PARTS) for _ in range(rng.randint(*parts)))


def c_expr(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([ident(rng), str(rng.randint(0, 1024)), "0x%X" % rng.randint(0, 0xFFFFFFFF),
                           "%d.%df" % (rng.randint(0, 9), rng.randint(0, 999)), "NULL", "'\\n'", "'x'",
                           "sizeof(%s)" % rng.choice(C_TYPES).rstrip(" *")])
    if r < 0.6:
        op = rng.choice(["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "&&", "||", "==", "!=", "<", ">=",
                         "<="])
        return "%s %s %s" % (c_expr(rng, depth + 1), op, c_expr(rng, depth + 1))
    if r < 0.75:
        return "%s->%s[%s]" % (ident(rng, (1, 1)), ident(rng), c_expr(rng, depth + 1))
    if r < 0.9:
        return "%s(%s)" % (ident(rng), ", ".join(c_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))))
    return "(%s)" % c_expr(rng, depth + 1)


def c_statement(rng, ind, depth):
    r = rng.random()
    if depth < 3 and r < 0.15:
        body = "".join(c_statement(rng, ind + "    ", depth + 1) for _ in range(rng.randint(1, 4)))
        return "%sfor (int64_t %s = 0; %s < %s; %s++) {\n%s%s}\n" % (ind, "i", "i", c_expr(rng, 2), "i", body, ind)
    if depth < 3 and r < 0.3:
        body = "".join(c_statement(rng, ind + "    ", depth + 1) for _ in range(rng.randint(1, 3)))
        s = "%sif (%s) {\n%s%s}" % (ind, c_expr(rng), body, ind)
        if rng.random() < 0.4:
            s += " else {\n%s%s}" % (c_statement(rng, ind + "    ", depth + 1), ind)
        return s + "\n"
    if r < 0.4:
        return '%sfprintf(stderr, "%s: %%s at %%d\\n\\t(%%zu bytes)\\n", %s, %s, %s);\n' % (
            ind, ident(rng), ident(rng), c_expr(rng, 2), ident(rng))
    if r < 0.5:
        return "%s// %s\n" % (ind, english_sentence(rng))
    if r < 0.6:
        return "%sreturn %s;\n" % (ind, c_expr(rng, 1))
    if r < 0.75:
        return "%s%s %s = %s;\n" % (ind, rng.choice(C_TYPES), ident(rng), c_expr(rng))
    return "%s%s %s= %s;\n" % (ind, ident(rng), rng.choice(["", "+", "-", "*", "|", "&", "<<", ">>"]), c_expr(rng))


def c_unit(rng):
    r = rng.random()
    if r < 0.1:
        return "#include <%s.h>\n" % rng.choice(["stdio", "stdlib", "string", "stdint", "math", "pthread", "errno"])
    if r < 0.2:
        return "#define %s %s\n" % (ident(rng).upper(), c_expr(rng, 2))
    if r < 0.3:
        fields = "".join("    %s %s;%s\n" % (rng.choice(C_TYPES), ident(rng),
                                             "  // " + english_sentence(rng) if rng.random() < 0.3 else "")
                         for _ in range(rng.randint(2, 6)))
        return "\n/* %s */\nstruct %s {\n%s};\n" % (english_sentence(rng), ident(rng), fields)
    ind = "\t" if rng.random() < 0.2 else "    "
    args = ", ".join("%s %s" % (rng.choice(C_TYPES), ident(rng)) for _ in range(rng.randint(0, 4))) or "void"
    body = "".join(c_statement(rng, ind, 1) for _ in range(rng.randint(2, 8)))
    doc = "/* %s\n * %s\n */\n" % (english_sentence(rng), english_sentence(rng)) if rng.random() < 0.5 else ""
    return "\n%sstatic %s %s(%s)\n{\n%s}\n" % (doc, rng.choice(C_TYPES), ident(rng), args, body)


def gen_code_c(rng, size):
    return fill(rng, size, c_unit)


def py_expr(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.35:
        return rng.choice([ident(rng), str(rng.randint(0, 4096)), "%d.%d" % (rng.randint(0, 9), rng.randint(0, 99)),
                           "None", "True", "'%s'" % rng.choice(ENGLISH_WORDS), '"%s"' % ident(rng), "1e-5",
                           "0b1011", "0o17", "x ** 2"])
    if r < 0.55:
        return "%s %s %s" % (py_expr(rng, depth + 1), rng.choice(["+", "-", "*", "/", "//", "%", "==", "!=", "and",
                                                                   "or", "in", "is not", "@"]),
                             py_expr(rng, depth + 1))
    if r < 0.7:
        return "[%s for %s in %s if %s]" % (py_expr(rng, 2), "x", ident(rng), py_expr(rng, 2))
    if r < 0.8:
        return "f\"{%s!r}: {%s:>8.3f} %s\"" % (ident(rng), ident(rng), rng.choice(ENGLISH_WORDS))
    if r < 0.9:
        return "{%s}" % ", ".join("'%s': %s" % (ident(rng), py_expr(rng, depth + 1)) for _ in range(rng.randint(1, 3)))
    return "%s(%s)" % (ident(rng), ", ".join(py_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))))


def py_block(rng, ind, depth):
    lines = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if depth < 3 and r < 0.15:
            lines.append("%sfor %s in range(%s):\n" % (ind, ident(rng, (1, 1)), py_expr(rng, 2)))
            lines.append(py_block(rng, ind + "    ", depth + 1))
        elif depth < 3 and r < 0.3:
            lines.append("%sif %s:\n" % (ind, py_expr(rng)))
            lines.append(py_block(rng, ind + "    ", depth + 1))
            if rng.random() < 0.4:
                lines.append("%selse:\n%s" % (ind, py_block(rng, ind + "    ", depth + 1)))
        elif r < 0.4:
            lines.append("%s# %s\n" % (ind, english_sentence(rng)))
        elif r < 0.5:
            lines.append("%sreturn %s\n" % (ind, py_expr(rng)))
        elif r < 0.55:
            lines.append("%sraise ValueError(f\"bad {%s}: expected %s\")\n" % (ind, ident(rng), ident(rng)))
        else:
            lines.append("%s%s %s= %s\n" % (ind, ident(rng), rng.choice(["", "", "+", "-", "*"]), py_expr(rng)))
    return "".join(lines)


def py_unit(rng):
    r = rng.random()
    if r < 0.15:
        return "import %s\nfrom %s import %s\n" % (rng.choice(["os", "sys", "json", "re", "math"]),
                                                   rng.choice(["typing", "pathlib", "collections"]),
                                                   rng.choice(["Optional", "Path", "defaultdict"]))
    deco = "@%s\n" % rng.choice(["staticmethod", "functools.lru_cache(maxsize=None)", "torch.no_grad()"]) \
        if rng.random() < 0.3 else ""
    args = ", ".join("%s: %s" % (ident(rng), rng.choice(["int", "float", "str", "list[int]", "Optional[str]"]))
                     for _ in range(rng.randint(0, 3)))
    doc = '    """%s\n\n    %s\n    """\n' % (english_sentence(rng), english_sentence(rng)) if rng.random() < 0.5 else ""
    s = "\n\n%sdef %s(%s) -> %s:\n%s%s" % (deco, ident(rng), args, rng.choice(["int", "None", "dict"]), doc,
                                           py_block(rng, "    ", 1))
    if rng.random() < 0.1:
        s += '\n\nif __name__ == "__main__":\n    sys.exit(main(sys.argv[1:]))\n'
    return s


def gen_code_py(rng, size):
    return fill(rng, size, py_unit)


def random_word(rng, pools, lo=2, hi=8):
    out = []
    for _ in range(rng.randint(lo, hi)):
        a, b = rng.choice(pools)
        out.append(chr(rng.randint(a, b)))
    return "".join(out)


def script_paragraph(rng, script):
    parts = []
    for _ in range(rng.randint(2, 6)):
        if script in POOLS and rng.random() < 0.3:
            sep = "" if script in ("chinese", "japanese", "thai") else " "
            parts.append(sep.join(random_word(rng, POOLS[script]) for _ in range(rng.randint(3, 12))) +
                         rng.choice([".", "。", "!", "?", ""]))
        elif rng.random() < 0.1:
            parts.append(english_sentence(rng))  # scripts mixed with Latin, as real text is
        else:
            parts.append(rng.choice(SAMPLES[script]))
    sep = "" if script in ("chinese", "japanese") and rng.random() < 0.5 else " "
    return sep.join(parts) + rng.choice(["\n", "\n\n", "\n\n"])


def gen_script(script, form=None):
    def gen(rng, size):
        text = fill(rng, size, lambda rng: script_paragraph(rng, script))
        return unicodedata.normalize(form, text) if form else text
    return gen


# Out of canonical order, to be reordered and composed by NFC: a + dot below + acute,
# written as a + acute + dot below; q + acute + dot below (no precomposed form).
NON_CANONICAL = ["a\u0301\u0323", "e\u0302\u0323", "o\u031b\u0301", "q\u0301\u0323", "u\u0308\u0304\u0323"]


def gen_latin_nfd(rng, size):
    def para(rng):
        p = unicodedata.normalize("NFD", script_paragraph(rng, "latin"))
        if rng.random() < 0.5:
            p = p.replace(" ", " " + rng.choice(NON_CANONICAL) + " ", 1)
        return p
    return fill(rng, size, para)


def gen_korean_jamo(rng, size):
    """Hangul as conjoining jamo (NFD), which NFC composes back into syllables."""
    return unicodedata.normalize("NFD", gen_script("korean")(rng, size))


def emoji_unit(rng):
    r = rng.random()
    if r < 0.3:
        return "".join(rng.choice(EMOJI + EMOJI_SEQUENCES) for _ in range(rng.randint(1, 12))) + \
            rng.choice([" ", "\n", ""])
    if r < 0.45:
        return " ".join(rng.choice(SYMBOLS) for _ in range(rng.randint(1, 8))) + " "
    s = english_sentence(rng)
    words = s.split(" ")
    k = rng.randrange(len(words) + 1)
    words.insert(k, rng.choice(EMOJI_SEQUENCES + EMOJI))
    return " ".join(words) + rng.choice([" ", "\n", "\n\n"])


def gen_emoji(rng, size):
    return fill(rng, size, emoji_unit)


DIGIT_SETS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "๐๑๒๓๔๕๖๗๘๙", "０１２３４５６７８９",
              "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"]
OTHER_NUMBERS = list("²³¹¼½¾⅓⅔⅛ⅠⅡⅢⅣⅫⅻ①②③⑩㉑")


def number_unit(rng):
    r = rng.random()
    if r < 0.2:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(4, 200))) + rng.choice([" ", "\n"])
    if r < 0.35:
        digits = rng.choice(DIGIT_SETS)
        return "".join(rng.choice(digits) for _ in range(rng.randint(1, 30))) + " "
    if r < 0.45:
        return " ".join(rng.choice(OTHER_NUMBERS) for _ in range(rng.randint(1, 6))) + " "
    forms = [
        "%d.%05d" % (rng.randint(0, 999), rng.randint(0, 99999)),
        "{:,}".format(rng.randint(1000, 10**12)),
        "{:,}".format(rng.randint(1000, 10**9)).replace(",", "\u00a0"),
        "{:,}".format(rng.randint(1000, 10**9)).replace(",", "\u202f"),
        "%04d-%02d-%02d" % (rng.randint(1900, 2100), rng.randint(1, 12), rng.randint(1, 28)),
        "%02d:%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)),
        "v%d.%d.%d" % (rng.randint(0, 20), rng.randint(0, 99), rng.randint(0, 999)),
        "0x%08X" % rng.randint(0, 2**32 - 1),
        "%d.%de%+d" % (rng.randint(1, 9), rng.randint(0, 999), rng.randint(-30, 30)),
        "-%d" % rng.randint(1, 10**6),
        "+1 (555) %03d-%04d" % (rng.randint(0, 999), rng.randint(0, 9999)),
        "%d.%d.%d.%d" % tuple(rng.randint(0, 255) for _ in range(4)),
        "abc%ddef" % rng.randint(0, 99999), "GPT%d" % rng.randint(1, 9), "x86_64", "$%d.%02d" % (rng.randint(0, 9999),
                                                                                             rng.randint(0, 99)),
        "%d%%" % rng.randint(0, 100), "1st 2nd 3rd %dth" % rng.randint(4, 99),
    ]
    return rng.choice(forms) + rng.choice([" ", " ", ", ", "\n", "; "])


def gen_numbers(rng, size):
    return fill(rng, size, lambda rng: number_unit(rng) if rng.random() < 0.8 else english_sentence(rng) + " ")


SPACES = [" ", " ", " ", "\t", "\u00a0", "\u2003", "\u2009", "\u3000", "\u202f", "\u205f", "\u1680", "\u2028",
          "\u2029", "\x0b", "\x0c"]


def whitespace_unit(rng):
    r = rng.random()
    if r < 0.2:
        ws = " " * rng.randint(1, 40)
    elif r < 0.3:
        ws = "\t" * rng.randint(1, 10)
    elif r < 0.45:
        ws = "\n" * rng.randint(1, 20)
    elif r < 0.55:
        ws = "\r\n" * rng.randint(1, 6)
    elif r < 0.6:
        ws = "\r"
    elif r < 0.8:
        ws = "".join(rng.choice(SPACES + ["\n", "\r\n", "\r"]) for _ in range(rng.randint(1, 12)))
    else:
        ws = " " * rng.randint(0, 8) + "\n" + " " * rng.randint(0, 8)  # trailing and leading spaces
    word = rng.choice(ENGLISH_WORDS + ["{", "}", "//", "x", "42", "ü", "漢字", "🙂"])
    return ws + word


def gen_whitespace(rng, size):
    return fill(rng, size, whitespace_unit)


CONTROLS = [chr(c) for c in range(0x01, 0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0) if c != 0x85]


def control_unit(rng):
    r = rng.random()
    if r < 0.3:
        return "".join(rng.choice(CONTROLS) for _ in range(rng.randint(1, 6))) + rng.choice(ENGLISH_WORDS)
    if r < 0.45:
        return "\x1b[%dm%s\x1b[0m " % (rng.randint(30, 37), rng.choice(ENGLISH_WORDS))
    if r < 0.55:
        return rng.choice(ENGLISH_WORDS) + "\b" * rng.randint(1, 3) + "\a "
    words = english_sentence(rng).split(" ")
    return rng.choice(CONTROLS).join(words) + rng.choice(["\n", " ", "\x0c\n"])


def gen_controls(rng, size):
    return fill(rng, size, control_unit)


def random_case(rng, s):
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)


def contraction_unit(rng):
    r = rng.random()
    if r < 0.45:
        base = rng.choice(["don", "can", "it", "we", "they", "you", "I", "she", "he", "that", "who", "y'all",
                           "James", "O", "rock", "x"])
        return random_case(rng, base) + random_case(rng, rng.choice(CONTRACTIONS)) + rng.choice([" ", ", ", ". "])
    if r < 0.6:
        apo = rng.choice(APOSTROPHES)
        return rng.choice(["don", "it", "we", "they", "O"]) + apo + rng.choice(["t", "s", "ll", "re", "Brien",
                                                                               "ve", "d", "M"]) + " "
    if r < 0.7:
        return rng.choice(["'tis ", "'twas ", "'90s ", "'n' ", "''' ", "'' ", "' ", " 'quoted' ", "'S'T ",
                           "'ll've ", "y'all'd've ", "'LL'RE'VE "])
    s = english_sentence(rng)
    return s.replace("'", rng.choice(APOSTROPHES)) + " "


def gen_contractions(rng, size):
    return fill(rng, size, contraction_unit)


def gen_mixed(rng, size):
    kinds = [gen_prose, gen_code_c, gen_code_py, gen_emoji, gen_numbers, gen_whitespace, gen_controls,
             gen_contractions, gen_latin_nfd] + [gen_script(s) for s in SAMPLES]
    return fill(rng, size, lambda rng: rng.choice(kinds)(rng, rng.randint(50, 600)))


# (category, weight, generator)
CATEGORIES = [
    ("prose", 20, gen_prose),
    ("code_c", 10, gen_code_c),
    ("code_py", 8, gen_code_py),
    ("latin", 4, gen_script("latin")),
    ("latin_nfd", 4, gen_latin_nfd),
    ("cyrillic", 4, gen_script("cyrillic")),
    ("greek", 3, gen_script("greek")),
    ("greek_nfd", 1, gen_script("greek", "NFD")),
    ("arabic", 4, gen_script("arabic")),
    ("hebrew", 3, gen_script("hebrew")),
    ("devanagari", 4, gen_script("devanagari")),
    ("thai", 3, gen_script("thai")),
    ("chinese", 5, gen_script("chinese")),
    ("japanese", 4, gen_script("japanese")),
    ("korean", 3, gen_script("korean")),
    ("korean_jamo", 1, gen_korean_jamo),
    ("emoji", 5, gen_emoji),
    ("numbers", 4, gen_numbers),
    ("whitespace", 4, gen_whitespace),
    ("controls", 3, gen_controls),
    ("contractions", 3, gen_contractions),
    ("mixed", 10, gen_mixed),
]

# ----------------------------------------------------------------------------
# Fixed files for the edge cases, written first.

SPECIAL_TOKENS = """\
Literal special-token strings, as they would appear in scraped text.
gpt2 and qwen3: <|endoftext|> in the middle, and at the end<|endoftext|>
<|endoftext|><|endoftext|> twice in a row, then foo<|endoftext|>bar inside a word.
llama3: <|begin_of_text|>Hello<|end_of_text|> <|eot_id|> <|start_header_id|>user<|end_header_id|>
llama3 reserved: <|reserved_special_token_0|> <|reserved_special_token_250|> <|reserved_special_token_251|>
qwen3: <|im_start|>system
You are helpful.<|im_end|>
<|im_start|>user
<think>hmm</think> <tool_call>{"name": "f"}</tool_call> <|fim_prefix|>def f():<|fim_suffix|><|fim_middle|>
llama2: <s>[INST] hello [/INST] answer </s><s> <unk> and HTML <s>strike</s> <S>upper</S>
Near misses: <|endoftext| <|ENDOFTEXT|> <|endoftext|>> <<|endoftext|> < |endoftext|> <|end_of_text |>
<|im_start|<|im_end|>> <<s>> <s <\\s> </ s> <|endoftext|\u200b>
  <|endoftext|>   with spaces around, \t<|endoftext|>\t tabs, and\n<|endoftext|>\nnewlines.
Chinese around it: 你好<|endoftext|>世界 and emoji 🙂<|eot_id|>🙂
<|endoftext|>"""

METASPACE = """\
The metaspace U+2581 (\u2581) that SentencePiece-style tokenizers use for a space:
\u2581leading, trailing\u2581, in\u2581the\u2581middle, doubled\u2581\u2581, spaced \u2581 out,
\u2581\u2581\u2581 alone, and next to a real space: \u2581 \u2581 \u2581.
Also U+2582 (\u2582) and a lookalike underscore _ for contrast.
"""

NFC_CASES = """\
Canonical reordering: a\u0301\u0323 e\u0302\u0323 q\u0301\u0323 o\u0328\u0304 (written out of order).
Composition: e\u0301 A\u030a n\u0303 c\u0327 u\u0308 \u1100\u1161\u11a8 \u1112\u1161\u11ab \u304b\u3099 \u30cf\u309a.
Composition exclusions (NFC decomposes these): \u0958 \u0959 \u095a \u0931 \u2126 \u212b \u212a \u0344 \u0f73 \u2adc.
Singletons: \u0340 \u0341 \u0343 \u0374 \u037e \u0387 \u1fef \u2000 \u2001.
CJK compatibility ideographs: \uf900 \uf901 \ufa10 \ufa30 \U0002f800 \U0002f801 (NFC maps them to unified ones).
Hangul LV + T: \uac00\u11a8 \ud4db\u11c2 and jamo that do not compose: \u1100\u1100 \u11a8\u1161.
Already NFC: caf\u00e9 \u00c5ngstr\u00f6m \uac01 \u30ac.
"""


def fixed_files(rng):
    long_runs = "".join([
        "a" * 5000, "\n",
        " " * 3000, "x\n",
        "".join(rng.choice("0123456789") for _ in range(3000)), "\n",
        "\n" * 500,
        "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(4000)),
        "==\n",
        "=" * 1000, "\n",
        "!" * 1000, "\n",
        "".join(rng.choice(EMOJI) for _ in range(500)), "\n",
        "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(2000)), "\n",
        "".join(rng.choice(SAMPLES["thai"]).replace(" ", "") for _ in range(20)), "\n",
        "\t" * 1000, "end",
    ])
    return [
        ("empty", ""),
        ("single_newline", "\n"),
        ("whitespace_only", "   \n\t  \n\n  \r\n \u3000 "),
        ("leading_space", "  two spaces lead this file, and three trail it   "),
        ("special_tokens", SPECIAL_TOKENS),
        ("metaspace", METASPACE),
        ("nfc_cases", NFC_CASES),
        ("long_runs", long_runs),
    ]


def check_text(name, text):
    """The characters this corpus keeps out (see the top of this file)."""
    for i, c in enumerate(text):
        cp = ord(c)
        if cp == 0 or cp == 0x85 or cp == 0xFEFF or 0xD800 <= cp <= 0xDFFF:
            sys.exit("make_corpus: %s: U+%04X at character %d" % (name, cp, i))
        if unicodedata.category(c) == "Cn":
            sys.exit("make_corpus: %s: U+%04X at character %d is not in Unicode %s"
                     % (name, cp, i, unicodedata.unidata_version))
    if re.search("[%s]\u017f" % "".join(APOSTROPHES), text):
        sys.exit("make_corpus: %s: an apostrophe before U+017F" % name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--bytes", type=int, default=1_300_000, help="total size to reach (default 1,300,000)")
    args = ap.parse_args()
    if unicodedata.unidata_version != "14.0.0":
        print("make_corpus: warning: this Python's Unicode is %s, not 14.0.0; the check for characters newer than"
              " Unicode 14 is off by that much" % unicodedata.unidata_version, file=sys.stderr)

    os.makedirs(args.out_dir, exist_ok=True)
    for f in os.listdir(args.out_dir):
        if NAME_RE.match(f):
            os.remove(os.path.join(args.out_dir, f))

    rng = random.Random(SEED)
    files = fixed_files(rng)
    total = sum(nbytes(t) for _, t in files)
    weights = [w for _, w, _ in CATEGORIES]
    while total < args.bytes:
        name, _, gen = rng.choices(CATEGORIES, weights)[0]
        text = gen(rng, rng.randint(1500, 7000))
        if rng.random() < 0.15:
            text = text.rstrip("\n")  # some files end without a newline
        files.append((name, text))
        total += nbytes(text)

    for i, (name, text) in enumerate(files):
        check_text(name, text)
        with open(os.path.join(args.out_dir, "%04d_%s.txt" % (i, name)), "wb") as f:
            f.write(text.encode("utf-8"))
    print("make_corpus: %d files, %d bytes in %s" % (len(files), total, args.out_dir))


if __name__ == "__main__":
    main()
