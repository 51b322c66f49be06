"""Task type of a request from its text: code, math, extraction, chat or creative.

A hand-weighted cue scorer, no model. Each task's score is the sum of two parts:

- **ask** cues: what the request asks for ("summarize", "write a function", "prove", "explain",
  "write a poem", `TL;DR:`), looked for in the request's opening and closing characters, where
  instructions sit; uncapped;
- **content** cues: what the text contains (code syntax, equations, maths words, story prose),
  counted over the whole text and capped per task, so a pasted code block cannot outvote "explain
  this code". Narrative prose that asks nothing (no request cue, no "?", no "you"/"I") is a story
  opening to continue: creative.

Highest score wins (ties: code, math, extraction, creative, chat); `chat` when no task reaches
`MIN_SCORE`. Labels follow what the answer mostly consists of (guide: `bench/prompts/README.md`).
Code and math accept far more draft tokens than open-ended chat (repetitive structure, copied
identifiers), extraction copies from its input (n-gram lookup accepts it), creative writing at high
temperature accepts least.

Vocabulary is matched on lowercased word tokens (set intersection) and space-padded phrases
(substring), so cost grows with the text, not with the vocabulary; regexes are kept for syntax.
Accuracy and latency: `python -m bench.classifier` on `bench/prompts/tasks.jsonl`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core import TaskType

MAX_CHARS = 4000  # longer texts keep their first and last MAX_CHARS / 2 characters
HEAD_CHARS = 320  # ask cues: the opening, where instructions sit ...
TAIL_CHARS = 160  # ... and the closing ("TL;DR:", "Summarize the above.")
MIN_SCORE = 2.0  # below this best score the request is `chat`
STORY_PROSE = 3.0  # creative content for request-free narrative prose (a story opening to continue)
CONTENT_CAP: dict[TaskType, float] = {"code": 6.0, "math": 6.0, "extraction": 4.0, "chat": 3.0,
                                      "creative": 4.0}
TIE_ORDER: tuple[TaskType, ...] = ("code", "math", "extraction", "creative", "chat")

_TOKEN = re.compile(r"[a-z0-9][a-z0-9_'+#]*")


@dataclass(frozen=True, slots=True)
class Words:
    """Vocabulary cue: `weight` per distinct listed word or phrase present, at most `max_hits`.

    `terms` are "|"-separated and tokenized like the text ("tl;dr" is the phrase "tl dr").
    """

    task: TaskType
    weight: float
    terms: str
    ask: bool  # True: opening + closing window, counted once; False: whole text, capped per task
    max_hits: int = 1


@dataclass(frozen=True, slots=True)
class Pattern:
    """Regex cue: `weight` per match, at most `max_hits`.

    Matched on "\n" + the text (lowercased when `lower`), so `\n` marks every line start. Patterns
    open with a literal or a character class, never `\b` or a multiline `^`: then the regex engine
    skips to candidate positions instead of trying each one (~10-90x faster on 500 characters).
    """

    task: TaskType
    weight: float
    regex: re.Pattern
    ask: bool
    max_hits: int = 1
    lower: bool = True
    needs: str = ""  # skipped unless the text holds one of these characters


def _p(task: TaskType, weight: float, regex: str, ask: bool, max_hits: int = 1,
       lower: bool = True, needs: str = "") -> Pattern:
    return Pattern(task, weight, re.compile(regex), ask, max_hits, lower, needs)


_LANGS = (r"python|javascript|typescript|js|ts|rust|golang|go|java|kotlin|swift|c\+\+|c#|c|"
          r"haskell|lua|php|ruby|scala|bash|shell|powershell|sql|numpy|r")
# _LANGS without the one-letter and common-word names (go, c, r, js, ts), plus markup and libraries
_SAFE_LANGS = (r"python|javascript|typescript|rust|golang|java|kotlin|swift|c\+\+|c#|haskell|lua|"
               r"php|ruby|scala|bash|shell|powershell|sql|css|html|numpy|pandas|regex")
_CODE_NOUNS = (r"function|method|class|script|program|query|regex|regexp|decorator|kernel|"
               r"component|endpoint|api|app|workflow|makefile|dockerfile|config|snippet|one-liner|"
               r"module|unit tests?|tests|interface|resource|struct|enum|cli|parser|tokenizer|"
               r"algorithm|server|code|hook|macro|migration")

_FORMS = ("poem|poems|poetry|story|stories|haiku|sonnet|limerick|lyrics|song|ballad|lullaby|rhyme|"
          "fable|fairy tale|myth|legend|fiction|novel|screenplay|monologue|dialogue|scene|toast|"
          "speech|joke|jokes|parody|slogan|tagline|blurb|backstory|plot twist|plot twists|verse|"
          "acrostic|rap|shanty|love letter")

WORD_CUES: tuple[Words, ...] = (
    # ask: what the request wants back
    Words("code", 6.0, "implement|refactor|debug this|debug my|help me debug|vectorize|vectorise|"
          "complete the function|add type hints|make this faster|make it faster|how do i fix|"
          "how can i fix|what should i change|what's wrong with this code|"
          "what's wrong with my code|what's wrong with this sql|what's wrong with this query|"
          "what's wrong with my script",
          True),
    Words("math", 4.0, "solve|compute|calculate|evaluate|simplify|factor|expand|integrate|"
          "differentiate|derive|prove|show that|estimate|long multiplication", True),
    Words("math", 2.5, "how many|step by step", True),
    Words("extraction", 7.0, "summarize|summarise|summary|tl;dr|tldr|extract|pull out|translate|"
          "translation|rewrite|rephrase|paraphrase|proofread|redact|condense|shorten|simplify this|"
          "simplify the|reformat|normalize|normalise|key takeaways|main points|write the minutes|"
          "bullet list|bulleted list|turn this into|turn these into|change all the verbs|"
          "change the verbs|change the tense|copy out|list every|list all|classify the sentiment|"
          "fix the spelling|fix the grammar|fix the punctuation|make this sound|make it sound|"
          "keep the wording|keep the content|keep the meaning|chronological order", True),
    Words("extraction", 2.5, "this text|the text|this passage|the passage|this paragraph|"
          "this article|the article|this email|this thread|this transcript|the transcript|"
          "this message|this document|this abstract|these reviews|this review|this log|"
          "these notes|this changelog|this contract|this clause|this signature|this recipe|"
          "this job posting|this chat|the following|these bullet points|these sentences", True),
    Words("creative", 6.0, _FORMS, True),
    Words("creative", 4.0, "imagine|invent|make up|come up with|pretend|roleplay|role-play|"
          "once upon|in the style of|fictional|fantasy|whimsical|vivid|poetic|creative names|"
          "names for", True),
    Words("chat", 7.0, "explain|how does|tell me about|walk me through|in plain words|"
          "in simple terms|in plain english|like i'm five|why is|why are|why do|why does", True),
    Words("chat", 4.0, "advice|tip|tips|recommend|recommendations|suggest|suggestions|ideas for|"
          "should i|worth|pros and cons|compare|versus|difference between|best way|"
          "what do you think|prefer|plan a|help me plan|gift", True),
    # content: what the text is made of
    Words("code", 1.5, "python|javascript|typescript|rust|golang|java|kotlin|swift|c++|haskell|"
          "lua|php|ruby|bash|powershell|sql|css|html|react|numpy|pandas|torch|pytorch|flask|"
          "django|express|asyncio|requests|pytest|git|docker|dockerfile|terraform|nginx|cuda|"
          "regex|json|yaml|api|traceback|in c|tqdm|scipy|sklearn|matplotlib|fastapi|boto3|aiohttp|"
          "selenium|beautifulsoup|redis|tensorflow|keras|npm|pip|kubectl|curl|grep|awk|jq|cron|"
          "webpack|jquery|node.js|nodejs|vue|angular|svelte|graphql|grpc|protobuf|postgres|"
          "postgresql|mysql|sqlite|mongodb|stdin|stdout|async|http", False, 3),
    Words("math", 1.5, "equation|equations|integral|derivative|theorem|lemma|proof|probability|"
          "prime|primes|matrix|determinant|eigenvalues|vector|vectors|polynomial|fraction|percent|"
          "percentage|average|median|variance|deviation|expected|divisors|digits|triangle|circle|"
          "radius|diameter|area|volume|angle|angles|slope|limit|series|sum|ways|combinations|"
          "permutations|subsets|factorial|gcd|lcm|remainder|divided|multiply|power|squared|binary|"
          "decimal|irrational|integer|arithmetic|distance|interest|injective|induction|cyclic",
          False, 4),
    Words("creative", 1.0, "was|were|had|she|he|her|his|once|suddenly|whispered|night|tale|"
          "kingdom|queen|king|dragon|forest|village|wizard|stranger", False, 4),
)

PATTERN_CUES: tuple[Pattern, ...] = (
    # ask, on the lowercased opening + closing window
    _p("code", 7.0, rf"(?:write|implement|create|generate|build|make|give me|show me|need|want)"
       rf"(?: [\w'+#-]+){{0,4}}? (?:{_CODE_NOUNS}|{_SAFE_LANGS})\b", True),  # verb + its object
    _p("code", 3.0, rf"(?:write|implement|create|generate|build|make|give me|show me|need)\b"
       rf"[^.?!\n]{{0,60}}\b(?:{_CODE_NOUNS})\b", True),
    _p("code", 5.0, r"(?:\n[ \t]*(?:def |class |async def |fn |func |function |public |private |"
       r"static |import |return |SELECT |WHERE |#include)[^\n]*|\n[ \t]*(?:if|for|while|with|"
       r"elif|else|try|except|switch)\b[^\n]*[:{][ \t]*|[{(\[][ \t]*|\n(?: {4}|\t)[^\n]*)\n?"
       r"[ \t]*\Z", True, lower=False),  # a completion prompt that ends inside code
    _p("code", 9.0, rf"(?:convert|port|translate|rewrite)\b[^.?!\n]{{0,40}}\b(?:to|into|in)\s+"
       rf"(?:vectori[sz]ed )?(?:{_LANGS})\b", True),
    _p("code", 5.0, r"fix\b[^.?!\n]{0,25}\b(?:bug|error|crash|exception|code|function|loop|query|"
       r"test)s?\b", True),
    _p("code", 2.0, rf"how (?:do|can|would) (?:i|you)\b[^.?!\n]{{0,60}}\b(?:in (?:{_LANGS})|git|"
       r"list of|dict|array|string|file|commit|branch)\b", True),
    _p("math", 4.0, r"find (?:the |all )?(?:value|area|volume|perimeter|equation|eigen\w*|inverse|"
       r"limit|derivative|integral|gcd|lcm|remainder|roots?|sum|product|probability|dimensions|"
       r"taylor|integer solutions|x\b)", True),
    _p("math", 2.5, r"what(?: i|')s \d", True),
    _p("extraction", 7.0, r"convert (?:this|these) (?:csv|json|yaml|xml|table|text|list|notes|"
       r"bullet points)\b", True),
    _p("extraction", 5.0, r"\n(?:tl;?dr|summary|one-sentence summary|keywords|paraphrase|"
       r"simplified[^:\n]*|passive|plain english|extracted fields|entities[^:\n]*|action items|"
       r"errors only|pros|cons|bullet points|json|rewrite[^:\n]*)\s*:", True),
    _p("extraction", 3.0, r"\n(?:english|french|german|spanish|italian|portuguese|japanese|"
       r"chinese|korean|russian|dutch|arabic|hindi)\s*:", True, 2),
    _p("extraction", 3.0, r"\n(?:article|passage|context|text|review|original|sentence|abstract|"
       r"transcript|document|email|invoice[^:\n]*|log excerpt|customer message|"
       r"product description|meeting notes[^:\n]*|headline[^:\n]*|input)\s*:", True, 2),
    _p("creative", 5.0, r"\n(?:story|poem|lyrics[^:\n]*|chapter \d+|verse \d*|chorus|title|"
       r"haiku[^:\n]*|dear diary|roses are red)\b|\n(?:int|ext)\. ", True),
    _p("creative", 3.0, rf"(?:write|compose|tell|give|create|make up|come up with|invent|pen)"
       rf"(?: [\w'-]+){{0,4}}? (?:{_FORMS.replace(' ', '[ -]')})\b", True),  # verb + its object
    _p("creative", 1.0, r"^\s*(?:write|compose)\b", True),
    _p("chat", 7.0, r"what does [^?\n]{1,60} (?:do|mean|match)\b", True),
    # functional writing; the lookbehind leaves "rewrite" to extraction
    _p("chat", 6.0, r"(?:write(?<![a-z]write)|draft|compose)\b[^.?!\n]{0,40}\b(?:e-?mail|message|"
       r"note|bio|post|reply|cover letter|letter to|memo|announcement|invitation|resume)\b", True),
    _p("chat", 4.0, r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|thanks|thank you)\b",
       True),
    _p("chat", 4.0, r"\n(?:user|human|<\|user\|>|<\|im_start\|>user)\b", True),
    _p("chat", 1.5, r"^\s*(?:what|why|how|who|when|where|which|is|are|do|does|should|can|could|"
       r"would)\b", True),
    # content, on the whole text: code syntax (original case)
    _p("code", 2.0, r"\n[ \t]*(?:def |class |import |from \S+ import |return\b|async def |await |"
       r"@\w+|#include|#!/|(?:if|for|while|with|elif|else|try|except)\b.*:[ \t]*(?=\n|\Z))",
       False, 5, False),
    _p("code", 2.0, r"[{};][ \t]*(?=\n|\Z)", False, 5, False),
    _p("code", 2.0, r"(?:SELECT|FROM|WHERE|GROUP BY|CREATE TABLE|INSERT INTO|WORKDIR|apiVersion)\b|"
       r"<\?php|<!DOCTYPE|</?[a-z][a-z0-9]*[ >]", False, 5, False),
    _p("code", 2.0, r"(?:fn|func|function|impl|fun) ?\w*\s*[(<{]|(?:let|const|var|mut) \w+\s*[:=]|"
       r"public (?:class|static|void|int)|(?:int|void|bool|char|struct) \*?\w+", False, 5, False,
       needs="{;="),
    _p("code", 1.0, r"=>|->|::|\+\+|!==?|===|&&|\|\||\.[A-Za-z_]\w*\(|_[a-z]|`[^`\n]+`|"
       r"\n(?: {4}|\t)\S", False, 5, False),
    # camelCase identifiers start lowercase (fetchUser); brand names do not (MongoDB)
    _p("code", 1.0, r"[ (.,\n\[][a-z]{1,20}[A-Z]", False, 3, False),
    _p("code", 3.0, r"```", False, 1, False),
    # content: maths notation (original case)
    _p("math", 2.0, r"\d\s*[+*/^×÷=<>≤≥]\s*[\d(a-z]|\d\s+[-−]\s+\d|\^\d|[∑∫√≤≥π∞×÷±≠≈]|"
       r"\\(?:frac|int|sum|sqrt|begin|lim|cdot|le|ge|pi|binom|infty)\b|\$[^$\n]+\$|=\s*\Z|"
       r"\(x\)|/d[a-z]\b|P\([A-Z]|E\[|\((?<=(?:sin|cos|tan|exp|log)\()",  # last: "sin(" etc.
       False, 5, False),
    _p("math", 2.0, r"[Ll]et [A-Za-z] (?:=|be)\b", False, 2, False),
    _p("math", 1.5, r"\d\s*%|\$\d", False, 2, False),
    _p("math", 1.0, r"\d\s*(?:ft|feet|m|cm|km|kg|mph|km/h|hours?|minutes|cups?|miles|meters?|"
       r"inches|marbles|cookies|apples|boxes)\b", False, 3),
    _p("math", 0.5, r"\d\d+", False, 3),
)
_ADDRESS = frozenset(("you", "your", "i", "i'm", "me", "my", "please"))  # a request, not prose


def _index(ask: bool) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[tuple[int, str], ...]]]:
    """Word -> ids of the WORD_CUES listing it; first word -> (id, space-padded phrase) pairs."""
    words: dict[str, list[int]] = {}
    phrases: dict[str, list[tuple[int, str]]] = {}
    for cue_id, cue in enumerate(WORD_CUES):
        if cue.ask != ask:
            continue
        for term in cue.terms.split("|"):
            tokens = _TOKEN.findall(term)
            if len(tokens) == 1:
                words.setdefault(tokens[0], []).append(cue_id)
            else:
                phrases.setdefault(tokens[0], []).append((cue_id, f" {' '.join(tokens)} "))
    return ({w: tuple(ids) for w, ids in words.items()},
            {w: tuple(pairs) for w, pairs in phrases.items()})


_ASK_WORDS, _ASK_PHRASES = _index(ask=True)
_CONTENT_WORDS, _CONTENT_PHRASES = _index(ask=False)


def _count_words(tokens: list[str], present: set[str], words: dict, phrases: dict,
                 counts: list[int]) -> None:
    """Adds to `counts[cue_id]` one per distinct listed word or phrase found in `tokens`."""
    for word in present & words.keys():
        for cue_id in words[word]:
            counts[cue_id] += 1
    starts = present & phrases.keys()
    if starts:
        joined = f" {' '.join(tokens)} "
        for word in starts:
            for cue_id, phrase in phrases[word]:
                counts[cue_id] += phrase in joined


def _window(text: str) -> str:
    """The opening and closing characters of `text`, where instructions usually sit."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


def task_scores(text: str) -> dict[TaskType, float]:
    """Score of every task for `text`: ask cues plus content cues capped per task."""
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS // 2] + "\n" + text[-MAX_CHARS // 2:]
    text = "\n" + text
    lower = text.lower()
    window, lower_window = _window(text), _window(lower)
    tokens = _TOKEN.findall(lower)
    token_set = set(tokens)
    win_tokens = tokens if window is text else _TOKEN.findall(lower_window)
    counts = [0] * len(WORD_CUES)
    _count_words(win_tokens, token_set if window is text else set(win_tokens), _ASK_WORDS,
                 _ASK_PHRASES, counts)
    _count_words(tokens, token_set, _CONTENT_WORDS, _CONTENT_PHRASES, counts)

    ask: dict[TaskType, float] = dict.fromkeys(TIE_ORDER, 0.0)
    content: dict[TaskType, float] = dict.fromkeys(TIE_ORDER, 0.0)
    for cue, hits in zip(WORD_CUES, counts):
        if hits:
            (ask if cue.ask else content)[cue.task] += cue.weight * min(hits, cue.max_hits)
    for cue in PATTERN_CUES:
        if cue.ask:
            target = lower_window if cue.lower else window
        else:
            target = lower if cue.lower else text
        if cue.needs and not any(c in target for c in cue.needs):
            continue
        if cue.max_hits == 1:
            hits = cue.regex.search(target) is not None
        else:
            hits = min(len(cue.regex.findall(target)), cue.max_hits)
        if hits:
            (ask if cue.ask else content)[cue.task] += cue.weight * hits
    if (content["creative"] and content["code"] == 0 and content["math"] <= 1.0
            and not any(ask.values()) and "?" not in text and not _ADDRESS & token_set):
        content["creative"] += STORY_PROSE
    return {t: ask[t] + min(content[t], CONTENT_CAP[t]) for t in TIE_ORDER}


def classify_text(text: str) -> TaskType:
    """Task type of `text` (the last user turn or the completion prompt); `chat` by default.

    Cost: one or two tokenizations, ~12 regex scans over at most MAX_CHARS characters and ~20
    over the HEAD_CHARS + TAIL_CHARS window; tens of microseconds (`python -m bench.classifier`).
    """
    scores = task_scores(text)
    best = max(TIE_ORDER, key=scores.__getitem__)  # first of TIE_ORDER on ties
    return best if scores[best] >= MIN_SCORE else "chat"
