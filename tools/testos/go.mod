module github.com/anvil-fleet/anvil/tools/testos

go 1.26.0
