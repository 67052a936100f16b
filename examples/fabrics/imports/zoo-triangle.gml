graph [
  comment "A Topology Zoo style WAN graph: routers, link speeds in LinkSpeed/LinkSpeedUnits or LinkSpeedRaw"
  node [ id 0 label "Amsterdam" ]
  node [ id 1 label "Berlin" ]
  node [ id 2 label "Paris" ]
  edge [ source 0 target 1 LinkSpeed "100" LinkSpeedUnits "G" LinkSpeedRaw 100000000000.0 ]
  edge [ source 1 target 2 LinkSpeedRaw 400000000000.0 ]
  edge [ source 0 target 2 ]
]
