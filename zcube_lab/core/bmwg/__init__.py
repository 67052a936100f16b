"""The IETF draft draft-calabria-bmwg-ai-fabric-inference-bench-05's tests by name (pure):
`catalogue` (every test of §5-§13, its status in the lab, its KPIs and parameters), `scaling`
(the draft's parameters next to the lab's scaled ones), `trials` (mean, 95% CI, Jain's index,
and whether two fabrics differ by more than their trials' spread). Issue 46."""
