"""A workflow drawn as its graph (server-rendered SVG, no script): steps in layers from left
to right (a step one layer right of the last step it waits for), each coloured by its status
and linking to its job; an edge out of a step that did not succeed is drawn as failed, so the
path a failure took through the workflow (the steps it left cancelled or waiting) shows.

Within a layer the steps are ordered by where the steps they wait for sit (the barycentre
heuristic, one pass), which keeps most edges from crossing without a layout library."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from markupsafe import Markup, escape

from jobsup.store.rows import StepInfo

NODE_W, NODE_H = 150, 38
GAP_X, GAP_Y = 56, 16
MARGIN = 8
FAILED = frozenset({"dead_lettered", "cancelled"})


def layers_of(steps: Sequence[StepInfo]) -> list[list[StepInfo]]:
    """The steps by layer: layer 0 waits for nothing, layer n for a step of layer n - 1.
    Worked out in rounds (a step's layer once all it waits for have theirs), not by recursion,
    so a long chain in any order draws."""
    names = {step.name for step in steps}
    depth: dict[str, int] = {}
    left = list(steps)
    while left:
        waiting = []
        for step in left:
            after = [dep for dep in step.depends_on if dep in names]
            if all(dep in depth for dep in after):
                depth[step.name] = 1 + max((depth[dep] for dep in after), default=-1)
            else:
                waiting.append(step)
        if len(waiting) == len(left):  # a cycle (enqueue refuses one): drawn after the rest all the same
            last = 1 + max(depth.values(), default=-1)
            depth.update({step.name: last for step in waiting})
            break
        left = waiting
    found: list[list[StepInfo]] = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for step in steps:
        found[depth[step.name]].append(step)
    row: dict[str, float] = {}
    for index, column in enumerate(found):
        if index:  # the barycentre of what each step waits for
            column.sort(key=lambda s: (_mean(row[d] for d in s.depends_on if d in row), s.name))
        row.update({step.name: position for position, step in enumerate(column)})
    return found


def _mean(values: Iterable[float]) -> float:
    found = list(values)
    return sum(found) / len(found) if found else 0.0


def workflow_graph(steps: Sequence[StepInfo], *, root: str = "") -> Markup:
    if not steps:
        return Markup("")
    layers = layers_of(steps)
    place: dict[str, tuple[float, float]] = {}
    for column, layer in enumerate(layers):
        for row, step in enumerate(layer):
            place[step.name] = (MARGIN + column * (NODE_W + GAP_X), MARGIN + row * (NODE_H + GAP_Y))
    width = MARGIN * 2 + len(layers) * NODE_W + (len(layers) - 1) * GAP_X
    height = MARGIN * 2 + max(len(layer) for layer in layers) * (NODE_H + GAP_Y) - GAP_Y
    status = {step.name: step.status for step in steps}
    edges = []
    for step in steps:
        x2, y2 = place[step.name]
        for dep in step.depends_on:
            if dep not in place:
                continue
            x1, y1 = place[dep]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            bend = GAP_X / 2
            kind = "edge failed" if status[dep] in FAILED else "edge"
            edges.append(
                f'<path class="{kind}" d="M{sx:.1f},{sy:.1f} C{sx + bend:.1f},{sy:.1f} {ex - bend:.1f},{ey:.1f} '
                f'{ex:.1f},{ey:.1f}"/>'
            )
    nodes = [_node(step, *place[step.name], root) for step in steps]
    failed = sum(1 for step in steps if step.status in FAILED)
    summary = f"workflow graph: {len(steps)} steps in {len(layers)} layers, {failed} failed or cancelled"
    return Markup(
        f'<svg class="dag" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(summary)}"><title>{escape(summary)}</title>{"".join(edges)}{"".join(nodes)}</svg>'
    )


def _node(step: StepInfo, x: float, y: float, root: str) -> str:
    title = f"{step.name}: job {step.job_id} ({step.job}), {step.status}, {step.attempts} attempts"
    if step.last_error:
        title += f"; last error: {step.last_error[:200]}"
    name = step.name if len(step.name) <= 20 else step.name[:19] + "…"
    return (
        f'<a href="{escape(root)}/jobs/{step.job_id}" class="step" data-step="{escape(step.name)}">'
        f"<title>{escape(title)}</title>"
        f'<rect class="node s-{escape(step.status)}" x="{x:.1f}" y="{y:.1f}" '
        f'width="{NODE_W}" height="{NODE_H}" rx="5"/>'
        f'<text x="{x + 8:.1f}" y="{y + 15:.1f}" class="name">{escape(name)}</text>'
        f'<text x="{x + 8:.1f}" y="{y + 30:.1f}" class="state">{escape(step.status)}</text></a>'
    )
