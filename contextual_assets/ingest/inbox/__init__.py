"""The inbox: which files become documents and under which keys (`file_selection`, `document_keys`), the
inbox's listing (`listing`), the per-entry decisions of a sensor tick (`tick_plan`), the tick run as
library code (`watcher`) and which documents share a run (`partition_ranges`)."""
