// The vendor contract: what every backend must do for the rest of the binary to work with it, checked the
// same way for each built-in vendor (every Ascend chip of HAMi's chart) and for tests/vendor/example (a
// vendor that is one folder, registered like the others). A new vendor is added to kModules and must pass
// unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backends/amd/amd.h"
#include "backends/ascend/ascend.h"
#include "backends/awsneuron/awsneuron.h"
#include "backends/biren/biren.h"
#include "backends/cambricon/cambricon.h"
#include "backends/enflame/enflame.h"
#include "backends/metax/metax.h"
#include "backends/hygon/hygon.h"
#include "backends/iluvatar/iluvatar.h"
#include "backends/kunlun/kunlun.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"
#include "backends/vastai/vastai.h"
#include "core/cluster_state.h"
#include "core/keys.h"
#include "k8s/objects.h"
#include "sim/device_plugins/device_plugin.h"
#include "tests/vendor/example/example.h"

namespace hami {
namespace {

struct Case {
  const char* label;    // the test's name
  const char* section;  // the module's
  VendorModule (*module)();
  const char* vendor = "";  // the backend under test among the section's ("" = its first)
  int fewest = 1;           // the fewest devices a container asks for (a super-pod 910C: a module pair)
};
const Case kModules[] = {{"nvidia", "nvidia", &backends::nvidia::Module},
                         {"cambricon", "cambricon", &backends::cambricon::Module},
                         {"hygon", "hygon", &backends::hygon::Module},
                         {"mthreads", "mthreads", &backends::mthreads::Module},
                         {"Ascend910A", "vnpus", &backends::ascend::Module, "Ascend910A"},
                         {"Ascend910B2", "vnpus", &backends::ascend::Module, "Ascend910B2"},
                         {"Ascend910B3", "vnpus", &backends::ascend::Module, "Ascend910B3"},
                         {"Ascend910B4_1", "vnpus", &backends::ascend::Module, "Ascend910B4-1"},
                         {"Ascend910B4", "vnpus", &backends::ascend::Module, "Ascend910B4"},
                         {"Ascend310P", "vnpus", &backends::ascend::Module, "Ascend310P"},
                         {"Ascend910C", "vnpus", &backends::ascend::Module, "Ascend910C", 2},
                         {"kunlun", "kunlun", &backends::kunlun::Module, "kunlun"},
                         {"XPU", "kunlun", &backends::kunlun::Module, "XPU"},
                         {"MR_V100", "iluvatars", &backends::iluvatar::Module, "MR-V100"},
                         {"MR_V50", "iluvatars", &backends::iluvatar::Module, "MR-V50"},
                         {"BI_V150", "iluvatars", &backends::iluvatar::Module, "BI-V150"},
                         {"BI_V100", "iluvatars", &backends::iluvatar::Module, "BI-V100"},
                         {"AWSNeuron", "awsneuron", &backends::awsneuron::Module},
                         {"amd", "amd", &backends::amd::Module},
                         {"vastai", "vastai", &backends::vastai::Module},
                         {"biren", "biren", &backends::biren::Module},
                         {"GCU", "enflame", &backends::enflame::Module, "GCU"},
                         {"Enflame", "enflame", &backends::enflame::Module, "Enflame"},
                         {"MetaxGpu", "metax", &backends::metax::Module, "Metax-GPU"},
                         {"MetaxSgpu", "metax", &backends::metax::Module, "Metax-SGPU"},
                         {"example", "example", &testing::example::Module}};

class VendorContract : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    module_ = GetParam().module();
    auto created = module_.create(VendorSettings{});
    ASSERT_TRUE(created) << created.error().message;
    ASSERT_FALSE(created->empty()) << "with default settings the module builds a backend";
    const std::string vendor = GetParam().vendor;
    for (auto& b : *created) {
      if (vendor.empty() || b->Vendor() == vendor) {
        backend_ = std::move(b);
        break;
      }
    }
    ASSERT_NE(backend_, nullptr) << "no backend " << vendor;
  }
  const BackendSpec& spec() const { return backend_->Spec(); }
  ContainerView Asking(std::string count) const {
    ContainerView c;
    c.name = "main";
    c.limits[spec().resources.count] = std::move(count);
    return c;
  }

  VendorModule module_;
  BackendPtr backend_;
};

TEST_P(VendorContract, ModuleNamesItsSectionAndItsProtocolKeys) {
  EXPECT_EQ(module_.section, GetParam().section);
  EXPECT_EQ(spec().config_section, module_.section);
  EXPECT_FALSE(spec().vendor.empty());
  EXPECT_FALSE(spec().display_name.empty());
  EXPECT_FALSE(spec().keys.allocated.empty());
  EXPECT_FALSE(spec().resources.count.empty());
  EXPECT_GE(spec().resources.memory_factor, 1);
  // A plugin writes the register annotation exactly when the vendor reads one; it always sets the count.
  DeviceInfo card;
  card.id = "card-0";
  card.count = 10;
  card.devmem = MiB(16384);
  card.devcore = Cores(100);
  const NodePublication published = backend_->Publish({card});
  EXPECT_EQ(published.annotation.has_value(), !spec().keys.register_annotation.empty());
  EXPECT_EQ(published.resources.count(spec().resources.count), 1u);
}

TEST_P(VendorContract, SchemaKeysAreUniqueAndEnabledIsLeftToConfig) {
  std::set<std::string> keys;
  for (const auto& f : module_.schema.fields) {
    EXPECT_TRUE(keys.insert(f.key).second) << "duplicate key " << f.key;
    EXPECT_NE(f.key, "enabled");
    if (f.kind == SettingKind::kGroup || f.kind == SettingKind::kRecordList) {
      EXPECT_FALSE(f.fields.empty()) << f.key;
    }
  }
  for (const auto& k : module_.schema.ignored) EXPECT_FALSE(keys.contains(k)) << k;
}

TEST_P(VendorContract, RegistersOnceUnderItsSection) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(GetParam().module()));
  EXPECT_NE(registry.Schema(GetParam().section), nullptr);
  EXPECT_TRUE(registry.Create(GetParam().section, VendorSettings{}));
  EXPECT_FALSE(registry.Register(GetParam().module())) << "a section registered twice must fail";
}

// The demo runs every vendor's nodes and pods: its pods are a list of {name, limits, ...}, and each node's
// cards read back through the vendor's own publication.
TEST_P(VendorContract, ItsDemoIsWellFormed) {
  if (!module_.demo.pods.empty()) {
    auto docs = k8s::ParseDocuments(module_.demo.pods, "demo pods");
    ASSERT_TRUE(docs) << docs.error().message;
    ASSERT_EQ(docs->size(), 1u);
    ASSERT_TRUE(docs->front().is_array());
    for (const auto& pod : docs->front().as_array()) {
      ASSERT_TRUE(pod.is_object());
      EXPECT_TRUE(pod.as_object().contains("name"));
      EXPECT_TRUE(pod.as_object().contains("limits"));
    }
  }
  for (const DemoNode& demo : module_.demo.nodes) {
    if (!demo.vendor.empty() && demo.vendor != spec().vendor) continue;  // another chip's node
    const NodePublication published = backend_->Publish(demo.cards);
    NodeView node;
    node.name = demo.name;
    if (published.annotation) node.annotations[spec().keys.register_annotation] = *published.annotation;
    node.capacity.insert(published.resources.begin(), published.resources.end());
    node.allocatable = node.capacity;
    auto devices = backend_->Discover(node);
    ASSERT_TRUE(devices) << devices.error().message;
    EXPECT_EQ(devices->size(), demo.cards.size()) << demo.name;
  }
}

TEST_P(VendorContract, ItsDemoNodesNameItsOwnBackends) {
  auto created = module_.create(VendorSettings{});
  ASSERT_TRUE(created);
  for (const DemoNode& demo : module_.demo.nodes) {
    if (demo.vendor.empty()) {
      EXPECT_EQ(created->size(), 1u) << demo.name << ": a section of several backends names the node's";
      continue;
    }
    EXPECT_TRUE(std::any_of(created->begin(), created->end(),
                            [&](const BackendPtr& b) { return b->Vendor() == demo.vendor; }))
        << demo.name << " names " << demo.vendor;
  }
}

TEST_P(VendorContract, ANodeWithoutItsPluginHasNoDevices) {
  NodeView node;
  node.name = "bare";
  auto devices = backend_->Discover(node);
  ASSERT_TRUE(devices) << devices.error().message;
  EXPECT_TRUE(devices->empty());
}

TEST_P(VendorContract, DiscoversWhatItsSimulatedPluginPublishes) {
  std::vector<sim::SimDevice> cards(3);
  for (int i = 0; i < 3; ++i) {
    cards[i].uuid = "card-" + std::to_string(i);
    cards[i].type = spec().vendor + "-model";
  }
  const NodePublication published = sim::PublishFor(*backend_, cards);
  NodeView node;
  node.name = "n1";
  if (published.annotation) node.annotations[spec().keys.register_annotation] = *published.annotation;
  node.capacity.insert(published.resources.begin(), published.resources.end());
  node.allocatable = node.capacity;
  auto devices = backend_->Discover(node);
  ASSERT_TRUE(devices) << devices.error().message;
  ASSERT_EQ(devices->size(), 3u);
  std::set<std::string> ids;
  for (const auto& d : *devices) {
    EXPECT_TRUE(d.health);
    EXPECT_GT(d.count, 0);
    EXPECT_TRUE(d.devmem.value() > 0 || d.devcore.value() > 0) << "a card offers memory or cores";
    ids.insert(d.id);
  }
  EXPECT_EQ(ids.size(), 3u) << "device ids are unique";
}

TEST_P(VendorContract, ReadsItsCountResource) {
  const int fewest = GetParam().fewest;
  auto one = backend_->RequestFor(Asking(std::to_string(fewest)));
  ASSERT_TRUE(one) << one.error().message;
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ((*one)->vendor, spec().vendor);
  EXPECT_EQ((*one)->count, fewest);

  ContainerView plain;
  plain.name = "plain";
  auto none = backend_->RequestFor(plain);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());

  auto bad = backend_->RequestFor(Asking("lots"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find(spec().resources.count), std::string::npos) << bad.error().message;
}

TEST_P(VendorContract, ItsAnnotationsReadBackAsTheSameAllocation) {
  PodVendorDevices devices{{ContainerDevice{0, "card-0", spec().vendor, MiB(1024), Cores(10), std::nullopt}}};
  Annotations written{{std::string(keys::kAssignedNode), "n1"}};
  Annotations out;
  backend_->Annotate(PodView{}, devices, written, std::chrono::system_clock::now(), out);
  ASSERT_TRUE(out.contains(spec().keys.allocated));

  std::vector<BackendPtr> list;
  list.push_back(std::move(backend_));
  const Backends backends(std::move(list));
  PodView pod;
  pod.ns = "default";
  pod.name = "p";
  pod.uid = "uid-p";
  pod.containers.push_back(ContainerView{});
  pod.annotations = out;
  pod.annotations[std::string(keys::kAssignedNode)] = "n1";
  auto read = AllocationFromAnnotations(pod, backends);
  ASSERT_TRUE(read) << read.error().message;
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->node, "n1");
  ASSERT_TRUE((*read)->devices.contains(backends.at(0).Vendor()));
  PodVendorDevices back = (*read)->devices.at(backends.at(0).Vendor());
  while (!back.empty() && back.back().empty()) back.pop_back();  // the list encoding may end in ';'
  EXPECT_EQ(back, devices);
}

TEST_P(VendorContract, AdmitsContainersAskingForItOnly) {
  PodView pod;
  ContainerView asking = Asking("1");
  auto yes = backend_->Admit(asking, pod);
  ASSERT_TRUE(yes) << yes.error().message;
  EXPECT_TRUE(*yes);
  ContainerView plain;
  plain.name = "plain";
  auto no = backend_->Admit(plain, pod);
  ASSERT_TRUE(no) << no.error().message;
  EXPECT_FALSE(*no);
}

INSTANTIATE_TEST_SUITE_P(Vendors, VendorContract, ::testing::ValuesIn(kModules),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.label);
                         });

}  // namespace
}  // namespace hami
