module github.com/anvil-fleet/anvil/libs/fields

go 1.26.0
