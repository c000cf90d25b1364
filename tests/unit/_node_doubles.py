"""Doubles shared by the unit tests of hami-node's outside checks (overcap, overshare)."""


class RecordingCluster:
    """The cluster as the checks use it: the node's pods, and the Events and evictions asked."""

    def __init__(self, pods):
        self.pods, self.events, self.evicted = pods, [], []

    def list_node_pods(self, node):
        return list(self.pods)

    def create_event(self, obj, reason, message, warning=True):
        self.events.append((obj["metadata"]["name"], reason, message))

    def evict_pod(self, namespace, name):
        self.evicted.append((namespace, name))
