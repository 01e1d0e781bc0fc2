from coda.cli import main

main()
