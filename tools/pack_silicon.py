"""Pack AIConfigurator's ``silicon_vllm.csv`` (measured vLLM serving runs) into the package:
the columns ``servesim validate --suite silicon`` reads, every row, values unchanged,
gzipped (``src/servesim/data/silicon_vllm.csv.gz``).

    python tools/pack_silicon.py PATH/TO/aiconfigurator/silicon_vllm.csv
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from servesim.validate.silicon import BUNDLED_CSV, COLUMNS  # noqa: E402


def pack(src: Path, dst: Path) -> int:
    with src.open(newline="") as f:
        rows = list(csv.DictReader(f))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([r[c] for c in COLUMNS])
    dst.write_bytes(gzip.compress(buf.getvalue().encode(), compresslevel=9, mtime=0))
    return len(rows)


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / BUNDLED_CSV
    print(f"{pack(Path(sys.argv[1]), out)} rows -> {out}")
