// The vendor contract: what every backend must do for the rest of the binary to work with it, checked the
// same way for every backend the built-in registry creates with default settings (every Ascend chip of
// HAMi's chart, each of a section's backends) and for tests/vendor/example (a vendor that is one folder,
// registered like the others). The list comes from the registry: a new vendor is checked once it is
// registered, and must pass unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "backends/builtin.h"
#include "core/cluster_state.h"
#include "core/keys.h"
#include "k8s/objects.h"
#include "sim/device_plugins/device_plugin.h"
#include "tests/vendor/example/example.h"

namespace hami {
namespace {

// The built-in vendors and the example, registered as the binary registers them.
const BackendRegistry& Registry() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    backends::RegisterBuiltinBackends(r).value();
    r.Register(testing::example::Module()).value();
    return r;
  }();
  return registry;
}

struct Case {
  std::string label;    // the test's name: the vendor key, letters and digits
  std::string section;  // the module's
  std::string vendor;   // the backend under test among the section's
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.section << "/" << c.vendor; }
std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& section : Registry().Sections()) {
    auto created = Registry().Create(section, VendorSettings{});
    if (!created || created->empty()) {
      cases.push_back(Case{section + "_builds_no_backend", section, ""});  // fails in SetUp, naming it
      continue;
    }
    for (const BackendPtr& b : *created) {
      std::string label = b->Vendor();
      for (char& c : label) {
        if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
      }
      cases.push_back(Case{label, section, b->Vendor()});
    }
  }
  return cases;
}

class VendorContract : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const VendorModule* module = Registry().Module(GetParam().section);
    ASSERT_NE(module, nullptr);
    module_ = *module;
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
  ASSERT_TRUE(registry.Register(module_));
  EXPECT_NE(registry.Schema(GetParam().section), nullptr);
  EXPECT_TRUE(registry.Create(GetParam().section, VendorSettings{}));
  EXPECT_FALSE(registry.Register(module_)) << "a section registered twice must fail";
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
    node.internal_ip = "10.0.0.1";  // as kubelet registers every node
    node.labels.insert(published.labels.begin(), published.labels.end());
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
  node.internal_ip = "10.0.0.1";
  node.labels.insert(published.labels.begin(), published.labels.end());
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
  // The fewest devices a container may ask for (a super-pod 910C: a module pair).
  int fewest = 1;
  while (fewest < 8 && !backend_->RequestFor(Asking(std::to_string(fewest)))) ++fewest;
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

INSTANTIATE_TEST_SUITE_P(Vendors, VendorContract, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& param) { return param.param.label; });

}  // namespace
}  // namespace hami
