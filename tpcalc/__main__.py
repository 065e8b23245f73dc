from tpcalc.cli import main

main()
