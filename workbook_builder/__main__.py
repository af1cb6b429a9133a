from workbook_builder.cli.main import main

raise SystemExit(main())
