module local/nwb-pause

go 1.26
