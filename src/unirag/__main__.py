from unirag.cli.main import main

main()
