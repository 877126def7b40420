"""The context a header request carries: the chunk's own section around it, within a token budget."""

from __future__ import annotations

from collections import defaultdict

from contextual_assets.headers.base import HeaderRequest
from contextual_assets.models import ParsedDocument
from contextual_assets.parsing.tokens import TokenCounter


def header_requests(doc: ParsedDocument, counter: TokenCounter, context_tokens: int) -> list[HeaderRequest]:
    """Each chunk with its section as context, trimmed symmetrically around the chunk to the budget."""
    sections: dict[tuple, list[int]] = defaultdict(list)
    for index, chunk in enumerate(doc.chunks):
        sections[(chunk.source_doc, tuple(chunk.section_path))].append(index)
    token_counts = [c.token_count for c in doc.chunks]
    requests: list[HeaderRequest] = []
    for index, chunk in enumerate(doc.chunks):
        members = sections[(chunk.source_doc, tuple(chunk.section_path))]
        position = members.index(index)
        left, right = position, position
        used = token_counts[index]
        while True:
            grown = False
            if left > 0 and used + token_counts[members[left - 1]] <= context_tokens:
                left -= 1
                used += token_counts[members[left]]
                grown = True
            if right < len(members) - 1 and used + token_counts[members[right + 1]] <= context_tokens:
                right += 1
                used += token_counts[members[right]]
                grown = True
            if not grown:
                break
        before = [doc.chunks[i].text for i in reversed(members[left:position])]
        after = [doc.chunks[i].text for i in members[position + 1 : right + 1]]
        requests.append(HeaderRequest(chunk=chunk, before=before, after=after))
    return requests
