module github.com/anvil-fleet/anvil/agent

go 1.26.0
