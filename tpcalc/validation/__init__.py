"""Published training layouts (layouts.yaml) that `tpcalc validate --memory` checks."""
