"""An index version's life: which versions a run builds, what a version covers, where a deployment stands."""
