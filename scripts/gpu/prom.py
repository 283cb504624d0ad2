"""Series of one metric family in Prometheus text exposition, for the GPU
scripts that read `gdrtrace serve`'s /metrics scrapes."""
import re

_LABEL = re.compile(r'(\w+)="([^"]*)"')


def series(text, name):
    """(labels, value) of every sample of NAME that has labels."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(_LABEL.findall(line[len(name) + 1:line.rindex("}")]))
            yield labels, float(line.rsplit(" ", 1)[1])
