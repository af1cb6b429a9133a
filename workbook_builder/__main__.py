from workbook_builder.cli.app import main

raise SystemExit(main())
