"""attnsheets: Excel workbooks in which every step of attention is a live formula."""

__version__ = "0.1.0"
