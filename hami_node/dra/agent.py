"""hami-node's DRA parts wired together (kubeletPlugin: dra): the prepared-claims state, the
driver, its gRPC sockets and the ResourceSlice publisher, each boundary injectable."""
import os
from pathlib import Path
from typing import Callable, Optional

from hami_common import draplugin
from hami_common.constants import DRA_DRIVER
from hami_node.dra.api import DraApi
from hami_node.dra.claims import Shaping
from hami_node.dra.driver import DraDriver
from hami_node.dra.publisher import SlicePublisher
from hami_node.dra.service import DraPluginServer
from hami_node.dra.slices import SliceOptions
from hami_node.dra.state import PreparedState, StateError
from hami_node.plugin.errors import ClusterError, NodeAgentError

CHECKPOINT = "checkpoint.json"


def slice_options(config, backend, node: dict) -> SliceOptions:
    """The slice's settings from the configuration, the driver's versions and the Node."""
    driver_version, cuda_version = backend.versions()
    return SliceOptions(driver=DRA_DRIVER, node=config.node_name,
                        node_uid=(node.get("metadata") or {}).get("uid", ""),
                        consumable=config.dra_consumable_capacity,
                        memory_scaling=config.device_memory_scaling,
                        core_scaling=config.device_core_scaling,
                        driver_version=driver_version, cuda_version=cuda_version)


def start_dra(config, table, backend, cluster, layout, api: Optional[DraApi] = None, *,
              log: Callable[[str], None] = print) -> tuple:
    """Starts the DRA driver; its (name, part) list for the agent's watchdog, and the socket
    kubelet calls it on."""
    if api is None:
        from hami_node.dra.api import KubeDra
        api = KubeDra(cluster.api_client)
    try:
        node = cluster.get_node(config.node_name)
    except ClusterError as e:
        raise NodeAgentError(f"cannot read Node {config.node_name} ({e}); check nodeName and "
                             "the agent's RBAC (nodes: get)") from e
    options = slice_options(config, backend, node)
    plugin_dir = Path(draplugin.service_socket(config.kubelet_root_dir, DRA_DRIVER)).parent
    try:
        os.makedirs(plugin_dir, exist_ok=True)
        state = PreparedState(plugin_dir / CHECKPOINT, Path(config.cdi_spec_dir), layout)
    except (OSError, StateError) as e:
        raise NodeAgentError(f"kubeletRootDir {config.kubelet_root_dir}: {e}") from e
    driver = DraDriver(api, table, options,
                       Shaping(cdi_kind=config.cdi_kind,
                               disable_core_limit=config.disable_core_limit), state, log=log)
    publisher = SlicePublisher(api, table, options, config.annotation_interval, state,
                               log=log)
    server = DraPluginServer(config.kubelet_root_dir, DRA_DRIVER, driver, log=log,
                             on_register=publisher.poke)
    publisher.start()
    server.start()
    return [("ResourceSlice publisher", publisher), ("DRA sockets", server)], \
        server.service_path
