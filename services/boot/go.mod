module github.com/anvil-fleet/anvil/services/boot

go 1.26

require github.com/anvil-fleet/anvil/libs/events v0.0.0

replace github.com/anvil-fleet/anvil/libs/events => ../../libs/events
