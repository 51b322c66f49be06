"""Task type of a request from its text: code, math, extraction, chat or creative.

A hand-weighted cue scorer, no model. Each task's score is the sum of two parts:

- **ask** cues: what the request asks for ("summarize", "write a function", "prove", "explain",
  "write a poem", `TL;DR:`), looked for in its opening and closing characters, where instructions sit;
- **content** cues: what the text contains (code syntax, equations, story prose), counted over the
  whole text and capped per task, so a pasted code block cannot outvote "explain this code".

Highest score wins; `chat` when no task reaches `MIN_SCORE`. Labels follow what the answer mostly
consists of (guide: `bench/prompts/README.md`). Code and math accept far more draft tokens than
open-ended chat (repetitive structure, copied identifiers), extraction copies from its input (n-gram
lookup accepts it), creative writing at high temperature accepts least.

Measured with `python -m bench.classifier` on the labeled prompts (`bench/prompts/tasks.jsonl`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.config import TaskType

MAX_CHARS = 4000  # longer texts keep their first and last MAX_CHARS / 2 characters
HEAD_CHARS = 320  # ask cues: the opening, where instructions sit ...
TAIL_CHARS = 160  # ... and the closing ("TL;DR:", "Summarize the above.")
MIN_SCORE = 2.0  # below this best score the request is `chat`
CONTENT_CAP: dict[TaskType, float] = {"code": 6.0, "math": 6.0, "extraction": 4.0, "chat": 3.0,
                                      "creative": 4.0}
TIE_ORDER: tuple[TaskType, ...] = ("code", "math", "extraction", "creative", "chat")


@dataclass(frozen=True, slots=True)
class Cue:
    """One regular expression adding `weight` per match (at most `max_hits`) to `task`."""

    task: TaskType
    weight: float
    pattern: re.Pattern
    ask: bool  # True: searched in the opening + closing, uncapped; False: whole text, capped
    max_hits: int = 1


def _re(pattern: str, flags: int = re.I) -> re.Pattern:
    return re.compile(pattern, flags)


_LANGS = (r"python|javascript|typescript|js|ts|rust|golang|go|java|kotlin|swift|c\+\+|c#|c|haskell|"
          r"lua|php|ruby|scala|bash|shell|powershell|sql|numpy|r")
_CODE_NOUNS = (r"function|method|class|script|program|query|regex|regexp|decorator|kernel|"
               r"component|endpoint|api|app|workflow|makefile|dockerfile|config|snippet|one-liner|"
               r"module|unit tests?|tests|interface|resource|struct|enum|cli|parser|tokenizer|"
               r"algorithm|server|code|hook|macro|migration")

ASK_CUES: tuple[Cue, ...] = (
    # code: requests whose answer is code
    Cue("code", 7.0, _re(rf"\b(write|implement|create|generate|build|make|give me|show me|need)\b"
                         rf"[^.?!\n]{{0,60}}\b({_CODE_NOUNS})\b"), True),
    Cue("code", 6.0, _re(r"\b(implement|refactor|debug|vectori[sz]e|complete the function|"
                         r"add type hints|make (this|it) faster)\b"), True),
    Cue("code", 9.0, _re(rf"\b(convert|port|translate|rewrite)\b[^.?!\n]{{0,40}}\b(to|into|in)\s+"
                         rf"(vectori[sz]ed )?({_LANGS})\b"), True),
    Cue("code", 5.0, _re(r"\bfix\b[^.?!\n]{0,25}\b(bug|error|crash|exception|code|function|loop|"
                         r"query|test)s?\b|\bhow (do|can|would|should) i fix\b|what'?s wrong with "
                         r"(this|my) (code|sql|query|function|script)|\bwhat should i change\b"),
        True),
    Cue("code", 2.0, _re(rf"\bhow (do|can|would) (i|you)\b[^.?!\n]{{0,60}}\b(in ({_LANGS})|git|"
                         r"list of|dict|array|string|file|commit|branch)\b"), True),
    # math: requests for a calculation, derivation or proof
    Cue("math", 4.0, _re(r"\b(solve|compute|calculate|evaluate|simplify|factor|expand|integrate|"
                         r"differentiate|derive|prove|show that|estimate|long multiplication|"
                         r"find (the |all )?(value|area|volume|perimeter|equation|eigen\w*|"
                         r"inverse|limit|derivative|integral|gcd|lcm|remainder|roots?|sum|product|"
                         r"probability|dimensions|taylor|integer solutions|x\b))"), True),
    Cue("math", 2.5, _re(r"\bhow many\b|\bwhat is \d|\bwhat'?s \d|\bstep by step\b"), True),
    # extraction: the answer comes from supplied text
    Cue("extraction", 7.0, _re(
        r"\b(summari[sz]e|summary|tl;?dr|extract|pull out|translate|translation|rewrite|rephrase|"
        r"paraphrase|proofread|redact|condense|shorten|simplify (this|the)|reformat|normali[sz]e|"
        r"key takeaways|main points|write the minutes|bullet(ed)? list|turn (this|these) into|"
        r"convert (this|these) (csv|json|yaml|xml|table|text|list|notes|bullet points)|"
        r"change (all )?the (verbs|tense)|copy out|list (every|all)|classify the sentiment|"
        r"fix the (spelling|grammar|punctuation)|make (this|it) (sound|more|less)|"
        r"keep the (wording|content|meaning)|in chronological order|rephrase)\b"), True),
    Cue("extraction", 2.5, _re(r"\b(this|these|the following|the|below) (text|passage|paragraph|"
                               r"article|email|thread|transcript|message|document|abstract|reviews?|"
                               r"log|notes|sentences?|changelog|contract|clause|signature|recipe|"
                               r"posting|chat|bullet points)\b"), True),
    Cue("extraction", 5.0, _re(r"^(tl;?dr|summary|one-sentence summary|keywords|paraphrase|"
                               r"simplified[^:\n]*|passive|plain english|extracted fields|"
                               r"entities[^:\n]*|action items|errors only|pros|cons|bullet points|"
                               r"json|rewrite[^:\n]*)\s*:", re.I | re.M), True),
    Cue("extraction", 3.0, _re(r"^(english|french|german|spanish|italian|portuguese|japanese|"
                               r"chinese|korean|russian|dutch|arabic|hindi)\s*:", re.I | re.M),
        True, 2),
    Cue("extraction", 3.0, _re(r"^(article|passage|context|text|review|original|sentence|abstract|"
                               r"transcript|document|email|invoice[^:\n]*|log excerpt|customer "
                               r"message|product description|meeting notes[^:\n]*|headline[^:\n]*|"
                               r"input)\s*:", re.I | re.M), True, 2),
    # creative: imaginative forms and invention
    Cue("creative", 6.0, _re(r"\b(poem|poetry|story|stories|haiku|sonnet|limerick|lyrics|song|"
                             r"ballad|lullaby|rhyme|fable|fairy tale|myth|legend|fiction|novel|"
                             r"screenplay|monologue|dialogue|scene|toast|speech|joke|parody|slogan|"
                             r"tagline|blurb|backstory|plot twists?|verse|acrostic|rap|shanty|"
                             r"love letter)s?\b"), True),
    Cue("creative", 4.0, _re(r"\b(imagine|invent|make up|come up with|pretend|role-?play|"
                             r"once upon|in the style of|fictional|fantasy|whimsical|vivid|"
                             r"poetic|creative names?|names? for (a|an|my))\b"), True),
    Cue("creative", 5.0, _re(r"^(story|poem|lyrics[^:\n]*|chapter \d+|verse \d*|chorus|title|"
                             r"haiku[^:\n]*|int\.|ext\.|dear diary|roses are red)\b",
                             re.I | re.M), True),
    Cue("creative", 1.0, _re(r"^\s*(write|compose)\b"), True),
    # chat: questions, advice, explanations, functional writing about the user's life
    Cue("chat", 7.0, _re(r"\b(explain|what does [^?\n]{1,60} (do|mean|match)|how does [^?\n]{1,40} "
                         r"work|why (is|are|do|does)|tell me about|walk me through|in (plain|"
                         r"simple) (words|terms|english)|like i'?m five)\b"), True),
    Cue("chat", 4.0, _re(r"\b(advice|tips?|recommend\w*|suggest\w*|ideas? for|should i|worth|"
                         r"pros and cons|compare|versus|difference between|best way|what do you "
                         r"think|prefer|plan a|help me plan|gift)\b"), True),
    Cue("chat", 6.0, _re(r"\b(write|draft|compose|help me write)\b[^.?!\n]{0,40}\b(e-?mail|"
                         r"message|note|bio|post|reply|cover letter|letter to|memo|announcement|"
                         r"invitation|resume)\b"), True),
    Cue("chat", 4.0, _re(r"^\s*(hi|hello|hey|good (morning|afternoon|evening)|thanks|thank you)\b|"
                         r"^(user|human|<\|user\|>|<\|im_start\|>user)\b", re.I | re.M), True),
    Cue("chat", 1.5, _re(r"^\s*(what|why|how|who|when|where|which|is|are|do|does|should|can|"
                         r"could|would)\b"), True),
)

CONTENT_CUES: tuple[Cue, ...] = (
    # code syntax
    Cue("code", 3.0, _re(r"```"), False),
    Cue("code", 2.0, _re(r"^\s*(def |class |import |from \S+ import |return\b|async def |await |"
                         r"@\w+|#include|#!/|(if|for|while|with|elif|else|try|except)\b.*:\s*$)",
                         re.M), False, 5),
    Cue("code", 2.0, _re(r"[{};]\s*$", re.M), False, 5),
    Cue("code", 2.0, _re(r"\b(fn \w+|func \w+|function\s*\w*|impl \w+|fun \w+)\s*[(<{]|"
                         r"\b(let|const|var|mut) \w+\s*[:=]|\bpublic (class|static|void|int)|"
                         r"\b(int|void|bool|char|struct) \*?\w+|\bpackage \w+$|"
                         r"\b(SELECT|FROM|WHERE|GROUP BY|CREATE TABLE|INSERT INTO|WORKDIR|"
                         r"apiVersion)\b|<\?php|<!DOCTYPE|</?[a-z][a-z0-9]*[ >]", re.M), False, 5),
    Cue("code", 1.0, _re(r"=>|->|::|\+\+|!==?|===|&&|\|\||\w{2,}\.\w+\(|\b[a-z]+_[a-z_]+\b|"
                         r"\b[a-z]+[A-Z]\w*\b|`[^`\n]+`|^( {4}|\t)\S", re.M), False, 5),
    Cue("code", 1.5, _re(r"\b(python|javascript|typescript|rust|golang|java|kotlin|swift|c\+\+|"
                         r"haskell|lua|php|ruby|bash|powershell|sql|css|html|react|numpy|pandas|"
                         r"torch|pytorch|flask|django|express|asyncio|requests|pytest|git|docker\w*|"
                         r"terraform|nginx|cuda|regex|json|yaml|api|traceback|\w+Error|in c)\b",
                         re.I), False, 3),
    # math notation and vocabulary
    Cue("math", 2.0, _re(r"\d\s*[+*/^×÷=<>≤≥]\s*[\d(a-z]|\d\s+[-−]\s+\d|\b[a-z]\^\d|"
                         r"\\(frac|int|sum|sqrt|begin|lim|cdot|le|ge|pi|binom|infty)\b|"
                         r"[∑∫√≤≥π∞×÷±≠≈]|\$[^$\n]+\$|=\s*$|\b(f|g)\(x\)|\bd\w*/d\w+|\bP\([A-Z]|"
                         r"\bE\[|\b(log|ln|sin|cos|tan|exp|sqrt)\s*[_(]|\b[Ll]et [A-Za-z] (=|be)\b"),
        False, 5),
    Cue("math", 1.5, _re(r"\b(equations?|integral|derivative|theorem|lemma|proof|probability|"
                         r"primes?|matrix|determinant|eigenvalues?|vectors?|polynomial|fraction|"
                         r"percent(age)?|average|median|variance|standard deviation|expected|"
                         r"divisors?|digits|triangle|circle|radius|diameter|area|volume|angles?|"
                         r"slope|limit|series|sum of|ways|combinations|permutations|subsets|"
                         r"factorial|gcd|lcm|remainder|divided by|multiply|power of|squared|"
                         r"binary|decimal|irrational|integer|arithmetic|distance|tip|interest|"
                         r"group of order|injective|induction)\b|\d\s*%|\$\d", re.I), False, 4),
    Cue("math", 1.0, _re(r"\d+\s*(ft|feet|m|cm|km|kg|mph|km/h|hours?|minutes|cups?|miles|meters?|"
                         r"inches|marbles|cookies|apples|boxes)\b|\b\d{2,}\b", re.I), False, 3),
    # story prose (raw openings to continue)
    Cue("creative", 1.0, _re(r"\b(was|were|had|she|he|her|his|once|suddenly|whispered|night|tale|"
                             r"kingdom|queen|king|dragon|forest|village|wizard|stranger)\b", re.I),
        False, 4),
)


def _ask_window(text: str) -> str:
    """The opening and closing characters of `text`, where instructions usually sit."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def task_scores(text: str) -> dict[TaskType, float]:
    """Score of every task for `text` (ask cues + capped content cues); for inspection and tests."""
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS // 2] + "\n" + text[-MAX_CHARS // 2:]
    window = _ask_window(text)
    scores: dict[TaskType, float] = dict.fromkeys(TIE_ORDER, 0.0)
    for cue in ASK_CUES:
        if cue.max_hits == 1:
            scores[cue.task] += cue.weight if cue.pattern.search(window) else 0.0
        else:
            scores[cue.task] += cue.weight * min(len(cue.pattern.findall(window)), cue.max_hits)
    content: dict[TaskType, float] = dict.fromkeys(TIE_ORDER, 0.0)
    for cue in CONTENT_CUES:
        content[cue.task] += cue.weight * min(len(cue.pattern.findall(text)), cue.max_hits)
    for task in TIE_ORDER:
        scores[task] += min(content[task], CONTENT_CAP[task])
    return scores


def classify_text(text: str) -> TaskType:
    """Task type of `text` (the last user turn or the completion prompt); `chat` by default.

    Cost: ~30 regex scans over at most MAX_CHARS characters (p50 / p99 in microseconds:
    `python -m bench.classifier`).
    """
    scores = task_scores(text)
    best = max(TIE_ORDER, key=scores.__getitem__)  # first of TIE_ORDER on ties
    return best if scores[best] >= MIN_SCORE else "chat"
