from workbook_builder.cli import main

raise SystemExit(main())
