"""Corpora the demo runs on offline, with nothing to fetch.

English: CPython's ``pydoc_data.topics`` holds the language reference topics that ``help()``
prints: some eighty documents of real technical prose.  Chinese (``anygrain demo
--lang zh``): eight short encyclopaedic paragraphs written for this package, with questions
whose answers occur in them.
"""

from __future__ import annotations

from collections.abc import Iterator

from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.records import SourceDocument


def pydoc_topics() -> Iterator[SourceDocument]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        text = topics[name].strip()
        if text:
            yield SourceDocument(
                doc_id=name, title=name, text=text, origin=f"pydoc_data.topics[{name!r}]"
            )


# Questions a Python user asks, with answer strings that occur in the reference text.
DEMO_QUESTIONS: list[tuple[str, list[str]]] = [
    ("Which statement is used to handle exceptions?", ["try"]),
    ("What keyword defines an anonymous function?", ["lambda"]),
    ("Which statement exits the nearest enclosing loop?", ["break"]),
    ("What does the yield expression produce when used in a function body?", ["generator"]),
    ("Which method is called to get the length of an object?", ["__len__"]),
    ("Which statement declares that names refer to module-level variables?", ["global"]),
    ("What statement does nothing and is used as a placeholder?", ["pass"]),
    ("Which method is called when an attribute lookup fails?", ["__getattr__"]),
    ("What operator is used for matrix multiplication?", ["@"]),
    ("Which statement is used to assert a condition while debugging?", ["assert"]),
]


# Chinese demo topics: (title, text), general knowledge written for the demo.
ZH_TOPICS: list[tuple[str, str]] = [
    (
        "长城",
        "长城是中国古代修建的军事防御工程。现存的长城大多建于明朝，东起河北的山海关，"
        "西至甘肃的嘉峪关。1987年，长城被列入世界文化遗产名录。",
    ),
    (
        "黄河",
        "黄河是中国第二长河，全长约五千四百六十四千米。黄河发源于青海省的巴颜喀拉山脉，"
        "流经九个省区，最后在山东省注入渤海。黄河流域是中华文明的重要发源地。",
    ),
    (
        "故宫",
        "故宫位于北京中轴线的中心，是明清两代的皇家宫殿。故宫始建于明朝永乐四年，"
        "占地约七十二万平方米。1925年，故宫博物院在这里成立。",
    ),
    (
        "大熊猫",
        "大熊猫是中国特有的哺乳动物，主要生活在四川、陕西和甘肃的山区。"
        "大熊猫的食物几乎全部是竹子，成年大熊猫每天要花十多个小时进食。",
    ),
    (
        "长江",
        "长江是中国第一长河，也是亚洲最长的河流。长江发源于青藏高原的唐古拉山脉，"
        "在上海注入东海。长江上的三峡大坝是世界上装机容量最大的水电站。",
    ),
    (
        "孔子",
        "孔子是春秋时期鲁国人，是儒家学派的创始人。孔子的言行被他的弟子记录在《论语》中。"
        "孔子一生周游列国，晚年回到鲁国整理古代文献。",
    ),
    (
        "丝绸之路",
        "丝绸之路是古代连接中国与地中海地区的贸易路线。西汉时，张骞两次出使西域，"
        "开辟了这条道路。丝绸、瓷器和茶叶经由这条路线运往西方。",
    ),
    (
        "西湖",
        "西湖位于浙江省杭州市的西部，湖面面积约六点五平方千米。"
        "苏堤和白堤把湖面分成几个部分。2011年，杭州西湖文化景观被列入世界遗产名录。",
    ),
]

ZH_DEMO_QUESTIONS: list[tuple[str, list[str]]] = [
    ("现存的长城大多建于哪个朝代？", ["明朝"]),
    ("黄河最后注入哪个海？", ["渤海"]),
    ("故宫博物院是哪一年成立的？", ["1925年"]),
    ("大熊猫的食物主要是什么？", ["竹子"]),
    ("长江在哪里注入东海？", ["上海"]),
    ("孔子的言行被记录在哪本书中？", ["《论语》", "论语"]),
    ("哪位使者开辟了丝绸之路？", ["张骞"]),
    ("西湖位于哪个城市？", ["杭州市", "杭州"]),
]


def chinese_topics() -> Iterator[SourceDocument]:
    """The Chinese demo corpus: one document per topic."""
    for i, (title, text) in enumerate(ZH_TOPICS):
        yield SourceDocument(doc_id=f"zh-{i}", title=title, text=text, origin="anygrain zh demo")


def demo_questions(lang: str = "en") -> Questions:
    """The demo's questions in ``lang`` (en: about the Python reference; zh: the Chinese topics)."""
    items = DEMO_QUESTIONS if lang == "en" else ZH_DEMO_QUESTIONS
    return Questions(
        [Question(id=f"demo-{lang}-{i}", text=t, answers=a) for i, (t, a) in enumerate(items)],
        source="anygrain.corpus.builtin",
        format="builtin",
    )
