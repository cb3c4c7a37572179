#include "topo/hardware_probe.h"

#ifdef GFSHIM_HAVE_UCX

#include <uct/api/uct.h>

#include <string>

#include "topo/dynamic_library.h"

namespace gfshim {
namespace {

struct UctApi {
  decltype(&ucs_async_context_create) asyncCreate;
  decltype(&ucs_async_context_destroy) asyncDestroy;
  decltype(&uct_worker_create) workerCreate;
  decltype(&uct_worker_destroy) workerDestroy;
  decltype(&uct_query_components) queryComponents;
  decltype(&uct_release_component_list) releaseComponents;
  decltype(&uct_component_query) componentQuery;
  decltype(&uct_md_config_read) mdConfigRead;
  decltype(&uct_config_release) configRelease;
  decltype(&uct_md_open) mdOpen;
  decltype(&uct_md_close) mdClose;
  decltype(&uct_md_query_tl_resources) queryTlResources;
  decltype(&uct_release_tl_resource_list) releaseTlResources;
  decltype(&uct_md_iface_config_read) ifaceConfigRead;
  decltype(&uct_iface_open) ifaceOpen;
  decltype(&uct_iface_query) ifaceQuery;
  decltype(&uct_iface_close) ifaceClose;
};

Status loadApi(UctApi* api) {
  DynamicLibrary ucs, uct;
  GFSHIM_RETURN_IF_ERROR(DynamicLibrary::open("libucs.so.0", &ucs));
  GFSHIM_RETURN_IF_ERROR(DynamicLibrary::open("libuct.so.0", &uct));
  GFSHIM_RETURN_IF_ERROR(ucs.bind("ucs_async_context_create", &api->asyncCreate));
  GFSHIM_RETURN_IF_ERROR(ucs.bind("ucs_async_context_destroy", &api->asyncDestroy));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_worker_create", &api->workerCreate));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_worker_destroy", &api->workerDestroy));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_query_components", &api->queryComponents));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_release_component_list", &api->releaseComponents));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_component_query", &api->componentQuery));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_md_config_read", &api->mdConfigRead));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_config_release", &api->configRelease));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_md_open", &api->mdOpen));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_md_close", &api->mdClose));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_md_query_tl_resources", &api->queryTlResources));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_release_tl_resource_list", &api->releaseTlResources));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_md_iface_config_read", &api->ifaceConfigRead));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_iface_open", &api->ifaceOpen));
  GFSHIM_RETURN_IF_ERROR(uct.bind("uct_iface_query", &api->ifaceQuery));
  return uct.bind("uct_iface_close", &api->ifaceClose);
}

// Opens the interface of one transport on one device and reads its figures.
void probeResource(const UctApi& api, uct_md_h md, uct_worker_h worker,
                   const uct_tl_resource_desc_t& resource, std::vector<UcxTransport>* transports) {
  if (resource.dev_type != UCT_DEVICE_TYPE_NET && resource.dev_type != UCT_DEVICE_TYPE_SHM) return;
  uct_iface_config_t* config = nullptr;
  if (api.ifaceConfigRead(md, resource.tl_name, nullptr, nullptr, &config) != UCS_OK) return;
  uct_iface_params_t params = {};
  params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
  params.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
  params.mode.device.tl_name = resource.tl_name;
  params.mode.device.dev_name = resource.dev_name;
  uct_iface_h iface = nullptr;
  const ucs_status_t opened = api.ifaceOpen(md, worker, &params, config, &iface);
  api.configRelease(config);
  if (opened != UCS_OK) return;
  uct_iface_attr_t attr;
  if (api.ifaceQuery(iface, &attr) == UCS_OK) {
    UcxTransport transport;
    transport.name = std::string(resource.tl_name) + "/" + resource.dev_name;
    transport.linkClass =
        resource.dev_type == UCT_DEVICE_TYPE_SHM ? LinkClass::kIntraNode : LinkClass::kInterNode;
    transport.bytesPerSecond = attr.bandwidth.dedicated + attr.bandwidth.shared;
    transport.latencySeconds = attr.latency.c + attr.overhead;
    transports->push_back(transport);
  }
  api.ifaceClose(iface);
}

void probeMemoryDomain(const UctApi& api, uct_component_h component, const char* mdName,
                       uct_worker_h worker, std::vector<UcxTransport>* transports) {
  uct_md_config_t* config = nullptr;
  if (api.mdConfigRead(component, nullptr, nullptr, &config) != UCS_OK) return;
  uct_md_h md = nullptr;
  const ucs_status_t opened = api.mdOpen(component, mdName, config, &md);
  api.configRelease(config);
  if (opened != UCS_OK) return;
  uct_tl_resource_desc_t* resources = nullptr;
  unsigned count = 0;
  if (api.queryTlResources(md, &resources, &count) == UCS_OK) {
    for (unsigned i = 0; i < count; ++i) probeResource(api, md, worker, resources[i], transports);
    api.releaseTlResources(resources);
  }
  api.mdClose(md);
}

}  // namespace

Status probeUcx(std::vector<UcxTransport>* transports) {
  static UctApi api;
  static const Status loaded = loadApi(&api);
  GFSHIM_RETURN_IF_ERROR(loaded);
  ucs_async_context_t* async = nullptr;
  if (api.asyncCreate(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK) {
    return Status::error(StatusCode::kUnsupported, "ucs_async_context_create failed");
  }
  uct_worker_h worker = nullptr;
  if (api.workerCreate(async, UCS_THREAD_MODE_SINGLE, &worker) != UCS_OK) {
    api.asyncDestroy(async);
    return Status::error(StatusCode::kUnsupported, "uct_worker_create failed");
  }
  std::vector<UcxTransport> found;
  uct_component_h* components = nullptr;
  unsigned componentCount = 0;
  if (api.queryComponents(&components, &componentCount) == UCS_OK) {
    for (unsigned c = 0; c < componentCount; ++c) {
      uct_component_attr_t attr = {};
      attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
      if (api.componentQuery(components[c], &attr) != UCS_OK) continue;
      std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
      attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
      attr.md_resources = mds.data();
      if (mds.empty() || api.componentQuery(components[c], &attr) != UCS_OK) continue;
      for (const uct_md_resource_desc_t& md : mds) {
        probeMemoryDomain(api, components[c], md.md_name, worker, &found);
      }
    }
    api.releaseComponents(components);
  }
  api.workerDestroy(worker);
  api.asyncDestroy(async);
  if (found.empty()) {
    return Status::error(StatusCode::kUnsupported,
                         "UCX reports no network or shared-memory transport");
  }
  *transports = found;
  return Status::ok();
}

}  // namespace gfshim

#else  // !GFSHIM_HAVE_UCX

namespace gfshim {

Status probeUcx(std::vector<UcxTransport>*) {
  return Status::error(StatusCode::kUnsupported, "this build has no UCX support (libucx-dev)");
}

}  // namespace gfshim

#endif
