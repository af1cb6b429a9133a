"""The workbook file through openpyxl, at the bottom of the house: `of_openpyxl`, the one
module that uses openpyxl's internals (reading, saving, the cells a sheet stores, copying
styles), and `versions`, the releases each library shortcut (here and in
`engines/internals/`) was written for."""
