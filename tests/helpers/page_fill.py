"""How full a printed page is, as the handout tests and benchmarks/pages.py measure it.

Fill of a page: the page rendered in grey at 30 dpi, the share of the printable height
(inside the 0.6 in top and bottom margins, where header and footer print) whose pixel rows
hold any ink (a pixel darker than 200 of 255). A page of blocks with empty bands between
them is about 0.7; a third of a page, 0.33."""

import subprocess
from pathlib import Path

DPI = 30
MARGIN_IN = 0.6  # the top and bottom margins (sheet/printing.py), header and footer in them


def page_fills(pdf: Path, folder: Path) -> list[float]:
    """Per page of `pdf`, the share of the printable height whose pixel rows hold any ink
    (the page images are made in `folder` and removed)."""
    prefix = folder / pdf.stem
    subprocess.run(["pdftoppm", "-gray", "-r", str(DPI), str(pdf), str(prefix)], check=True)
    images = sorted(folder.glob(f"{pdf.stem}-*.pgm"),
                    key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    fills = []
    for image in images:
        data = image.read_bytes()
        _, width, height, _, pixels = data.split(maxsplit=4)
        width, height = int(width), int(height)
        pixels = pixels[-width * height:]
        margin = int(MARGIN_IN * DPI) + 1
        rows = range(margin, height - margin)
        inked = sum(min(pixels[y * width:(y + 1) * width]) < 200 for y in rows)
        fills.append(inked / len(rows))
        image.unlink()
    return fills
