"""Words and names that are not persons, for the PERSON rules (``person.py``).

- ``ORG_WORDS``: words that make the capitalised run before them (or holding them) a firm, a place
  or a thing: "Morgan Stanley *Capital*", "Kennedy *Space Center*", "Parkinson's *disease*";
- ``FIRMS``: firms, brands, places and eponyms written like "Given Surname" (Morgan Stanley, Baker
  McKenzie, Paris Saint-Germain);
- ``PRODUCTS``: software, languages, products and firms named like a person (Jenkins, Kafka, Julia):
  never a person alone; part of a name only next to a known name that is no word ("Julia Roberts");
- ``NOT_ALONE``: given names that are, alone and without a cue, as often a place, a brand, a product
  or a god (Santiago, Lexus, Apollo), or a word of another language ("Ville", the French town: "Hôtel
  de Ville"): a lone one needs a cue ("Hi Carmen", "Carmen said");
- ``COMMON_WORD_SURNAMES``: common surnames that are also English words (Brown, Smith, Hopper):
  after a given name that is itself a word ("Mark Brown", "Grace Hopper") they make a name.

Written for kvfence from general knowledge of well-known firms, brands and software; no list was
built from a labelled corpus.
"""

from __future__ import annotations

__all__ = ["COMMON_WORD_SURNAMES", "FIRMS", "NOT_ALONE", "ORG_WORDS", "PRODUCTS"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _phrases(text: str) -> frozenset[str]:
    return frozenset(s.strip() for s in text.replace("\n", " ").split(",") if s.strip())


# Words that make the run before them a firm, a place or a thing, not a person.
ORG_WORDS = frozenset(["inc", "incorporated", "ltd", "limited", "llc", "llp", "plc", "corp", "corporation", "co", "company", "companies", "group", "holdings", "capital", "partners", "bank", "banking", "foundation", "institute", "institution", "university", "college", "school", "academy", "hospital", "clinic", "street", "st", "road", "rd", "avenue", "ave", "lane", "boulevard", "blvd", "drive", "way", "square", "park", "center", "centre", "prize", "award", "act", "law", "laws", "syndrome", "disease", "effect", "theorem", "equation", "principle", "hall", "airport", "station", "bridge", "tower", "building", "stadium", "arena", "library", "museum", "gallery", "motors", "motor", "records", "studios", "studio", "pictures", "labs", "lab", "technologies", "technology", "software", "systems", "consulting", "conseil", "associés", "associati", "consulenze", "associates", "brothers", "bros", "trust", "fund", "ventures", "media", "publishing", "press", "hotel", "restaurant", "straße", "strasse", "platz", "weg", "gmbh", "ag", "kg", "se", "sa", "sarl", "sas", "nv", "bv", "spa", "srl", "memorial", "medal", "cup", "trophy", "lecture", "fellowship", "scholarship", "chair", "street’s", "index", "theatre", "theater", "opera", "cathedral", "church", "chapel", "river", "lake", "mountain", "mount", "valley", "island", "islands", "bay", "beach", "county", "city", "town", "gardens", "estate", "farm", "winery", "brewery", "cafe", "café", "bakery", "pharma", "pharmaceuticals", "energy", "airlines", "airways", "fashion", "collection", "perfume", "watches", "cars", "automotive", "electric", "insurance", "securities", "investments"])
# Person-named firms, brands and places that are also "given name + surname".
FIRMS = frozenset(s.strip() for s in """
morgan stanley, charles schwab, wells fargo, dow jones, tommy hilfiger, calvin klein, ralph lauren,
hugo boss, louis vuitton, christian dior, yves saint laurent, estée lauder, estee lauder, walt disney,
harley davidson, harley-davidson, rolls royce, rolls-royce, aston martin, lockheed martin, martin marietta,
hewlett packard, hewlett-packard, arthur andersen, jack daniels, jack daniel, johnnie walker, jim beam,
mercedes benz, mercedes-benz, kimberly clark, kimberly-clark, carl zeiss, robert bosch, thomas cook,
jimmy choo, kate spade, michael kors, tory burch, ted baker, paul smith, edward jones, raymond james,
john deere, sherwin williams, sherwin-williams, albert heijn, ernst young, grant thornton, marks spencer,
victoria secret, jenny craig, betty crocker, ronald mcdonald, mary kay, tim hortons, ben jerry, steve madden,
sierra leone, costa rica, el salvador, san marino, santa monica, santa barbara, santa clara, santa fe,
monte carlo, victoria falls, alice springs, george town, port louis, san jose, la paz, mont blanc,
st louis, saint louis, st helena, saint helena, st paul, saint paul, st john, james bay, charles river,
jackson hole, lake louise, prince edward, prince george, prince albert, king george, queen elizabeth,
elizabeth line, victoria line, jordan valley, amber alert, grace period, mark down, will power,
will call, bill to, ship to, sold to, remit to, grace days, rose gold, sterling silver, pat down,
johns hopkins, carnegie mellon, van gogh museum, anne frank house, georgia tech, virginia tech,
são paulo, sao paulo, santiago de compostela, santiago de chile, santiago de cuba, domingo de ramos, domingo de resurrección,
domingo de pascua,
""".replace("\n", " ").split(",") if s.strip())


# Software, languages, products and firms whose names are people's names or surnames: never a
# person on their own, nor part of one.
PRODUCTS = frozenset(["jenkins", "kafka", "julia", "ruby", "rust", "ada", "pascal", "haskell", "erlang", "elixir", "hugo", "jekyll", "astro", "gatsby", "django", "flask", "rails", "sinatra", "laravel", "symfony", "spring", "grails", "kotlin", "scala", "swift", "perl", "python", "java", "groovy", "fortran", "cobol", "lisp", "clojure", "dart", "ansible", "puppet", "chef", "salt", "terraform", "vagrant", "consul", "nomad", "vault", "packer", "kubernetes", "docker", "podman", "helm", "airflow", "luigi", "celery", "dask", "spark", "hadoop", "hive", "pig", "flink", "storm", "beam", "cassandra", "redis", "mongo", "mongodb", "mysql", "postgres", "mariadb", "oracle", "sqlite", "neo4j", "elastic", "kibana", "logstash", "grafana", "prometheus", "loki", "tempo", "jaeger", "zipkin", "nginx", "apache", "tomcat", "jetty", "maven", "gradle", "sbt", "bazel", "ant", "sphinx", "pandoc", "jupyter", "pandas", "numpy", "scipy", "keras", "torch", "tensorflow", "alexa", "siri", "cortana", "watson", "bard", "claude", "gemini", "llama", "mistral", "falcon", "copilot", "jarvis", "sonar", "sonarqube", "jira", "confluence", "trello", "asana", "slack", "zoom", "teams", "outlook", "excel", "word", "access", "dynamo", "aurora", "athena", "glue", "lambda", "tesla", "ford", "dell", "hp", "boeing", "siemens", "bosch", "philips", "heineken", "michelin", "chanel", "hermès", "hermes", "armani", "gucci", "prada", "ferrari", "lamborghini", "porsche", "dior", "versace", "cartier", "zara", "mango", "ikea", "lego", "nestlé", "nestle", "kellogg", "disney", "mcdonald", "mcdonalds", "wendy", "wendys", "marriott", "hilton", "hyatt", "walmart", "kroger", "costco", "boots", "tesco", "sainsbury"])


ORG_WORDS = ORG_WORDS | _words("""
day night eve
space huis haus maison museo musée museu stichting stiftung fondation fundación fondazione fundação
prijs preis prix premio prémio allee gasse ufer damm straat laan gracht plein kade steeg singel
arena bros brothers sons söhne fils hijos figli zonen cie cia associati avocats rechtsanwälte advocaten
llc gmbh ag kg ohg ug sarl sàrl sas sa spa srl bv nv oy ab as asa aps plc pty
algorithm distance transform filter chain model method curve distribution process number constant
theorem lemma conjecture hypothesis inequality series integral function matrix space test scale score
index coefficient ratio rule cycle code cipher machine lymphoma reflex sign maneuver manoeuvre
workshop conference summit festival expo forum galeries galerie galleria galería magasins
airport terminal boulevard blvd highway freeway expressway tunnel pier harbour harbor port
market markets bazaar souk mall temple mosque pagoda shrine palace tomb mausoleum monastery
gate gata gatan gade vej vei veien vägen katu utca caddesi sokak marg chowk
institut instituut istituto instituto zentrum centrum centro klinik kliniek clinique clinica klinikum
hochschule universiteit gesellschaft verein vereniging pokal trofeo
room suite lounge auditorium boardroom
quartet quintet sextet septet octet orchestra ensemble choir quartett quintett orchester chor orchestre chœur
orquesta coro kwartet kwintet orkest koor
""")  # the institutes, centres, clinics, societies and cups of the other five languages: "Max Planck Institut",
# "Erasmus Medisch Centrum", "Robert Koch Institut" (no word here is a surname: "Schaal", "Coppa", "Beker" are);
# meeting rooms named after people ("the Alan Turing room", "Marie Curie Room", "Ada Lovelace suite"); ensembles
# named after their leader, six languages ("Miles Davis Quintet", "Glenn Miller Orchestra"; "Trio", "Band" are surnames)

FIRMS = FIRMS | _phrases("""
jones day, davis polk, sullivan cromwell, latham watkins, kirkland ellis, skadden arps, simpson thacher,
wachtell lipton, cleary gottlieb, cravath swaine, paul weiss, paul hastings, hogan lovells, white case,
freshfields bruckhaus, taylor wessing, morgan lewis, sidley austin, mayer brown, ropes gray, debevoise plimpton,
weil gotshal, milbank tweed, shearman sterling, allen gledhill, russell hobbs, morphy richards, laura ashley,
karen millen, bobbi brown, jo malone, charlotte tilbury, elizabeth arden, helena rubinstein, max factor,
estée lauder, paul mitchell, john frieda, vidal sassoon, robert mondavi, paul masson, tia maria,
aston villa, crystal palace, john hancock, piper jaffray, stifel nicolaus, janney montgomery scott, keefe bruyette woods, morgan keegan,
liberty mutual, lincoln national, jackson national, kelly services, otto versand, john cooper works, louis dreyfus, pierre fabre, pedro domecq, jan linders,
santiago bernabéu, roma termini, milano centrale, napoli centrale, torino porta nuova, henri willig, charlotte amalie, kitty hawk, ted lapidus, jack wills, joe browns,
baker mckenzie, clifford chance, allen overy, herbert smith, norton rose, simmons simmons, slaughter may,
jean paul gaultier, giorgio armani, dolce gabbana, salvatore ferragamo, oscar de la renta, carolina herrera,
vera wang, stella mccartney, alexander mcqueen, vivienne westwood, marc jacobs, tom ford, karl lagerfeld,
jil sander, marc o'polo, tom tailor, jack wolfskin, charles tyrwhitt, thomas pink, brooks brothers,
abercrombie fitch, bang olufsen, black decker, smith wesson, procter gamble, johnson johnson,
johnson matthey, johnson controls, thomson reuters, reckitt benckiser, booz allen, booz allen hamilton,
arthur little, price waterhouse, goldman sachs, merrill lynch, lehman brothers, salomon brothers,
bear stearns, franklin templeton, jp morgan, j p morgan, paris saint-germain, paris saint germain,
dean witter, smith barney, kidder peabody, john lewis, harvey nichols, dorothy perkins, peter jones,
eli lilly, bristol myers, bristol-myers squibb, boehringer ingelheim, becton dickinson, henry schein,
thermo fisher, zimmer biomet, sara lee, oscar mayer, jimmy dean, sam adams, captain morgan, jose cuervo,
don julio, william grant, duncan hines, uncle ben, chef boyardee, orville redenbacher, marie callender,
bob evans, papa john, little caesars, ruth chris, tommy bahama, levi strauss, eddie bauer, ben sherman,
fred perry, stan smith, christian louboutin, manolo blahnik, kenneth cole, anne klein, donna karan,
vera bradley, betsey johnson, anna sui, emilio pucci, roberto cavalli, ermenegildo zegna,
brunello cucinelli, diane von furstenberg, pierre cardin, nina ricci, guy laroche, sonia rykiel,
isabel marant, patek philippe, audemars piguet, vacheron constantin, jaeger lecoultre, raymond weil,
maurice lacroix, baume mercier, harry winston, van cleef, robert half, robert walters, michael page,
egon zehnder, korn ferry, russell reynolds, spencer stuart, heidrick struggles, oliver wyman,
roland berger, simon kucher, arthur d little, leo burnett, jones lang lasalle, cushman wakefield,
knight frank, marsh mclennan, willis towers watson, charles stanley, brewin dolphin, hargreaves lansdown,
piper sandler, william blair, houlihan lokey, perella weinberg, warburg pincus, kohlberg kravis roberts,
hellman friedman, clayton dubilier, thoma bravo, andreessen horowitz, kleiner perkins, jack henry,
emerson electric, colgate palmolive, church dwight, kraft heinz, ritz carlton, baker tilly, moss adams,
wolters kluwer, reed elsevier, simon schuster, harper collins, john wiley, janus henderson, t rowe price,
baillie gifford, martin currie, walter scott, axel springer, hubert burda, heinrich bauer, karl storz,
max mara, miu miu, alexander wang, mickey mouse, minnie mouse, donald duck, peter pan, tim hortons,
charles de gaulle, john f kennedy, martin luther king, warner bros, warner brothers, mary poppins,
ronald reagan, george washington bridge, dr pepper, dr oetker, dr martens, tim horton, wendy's,
bella italia, pizza hut, dunkin donuts, baskin robbins, ben jerry's, jack daniel's, johnnie walker,
""")

PRODUCTS = PRODUCTS | _words("""
seaborn matplotlib plotly bokeh streamlit gradio dash flax jax theano caffe mxnet onnx triton
jasmine karma mocha chai sinon jest vitest cypress selenium playwright puppeteer babel webpack rollup
parcel vite esbuild gulp grunt bower yarn deno electron tauri ember backbone meteor svelte angular
travis bamboo teamcity gerrit gitea gitlab bitbucket phabricator bugzilla mercurial
sentry datadog splunk nagios zabbix icinga graphite telegraf fluentd heroku netlify vercel pulumi
rancher portainer argo tekton spinnaker istio linkerd envoy traefik caddy kong zuul eureka hystrix
figma miro notion obsidian evernote zendesk freshdesk intercom hubspot marketo mailchimp twilio
stripe klarna revolut monzo okta auth0 xero sage quickbooks blender houdini godot unity rhino revit
ollama cody cursor devin aider bixby eliza tabnine codeium
wikipedia youtube reddit quora stackoverflow google bing chatgpt perplexity duckduckgo
lexus nikon kia dacia bentley skoda volvo honda toyota nissan mazda subaru renault peugeot citroen
""")

NOT_ALONE = _words("""
lexus nikon kia dacia romeo bentley cali salvador santiago rosario trinidad guadalupe lourdes fatima
carmen dolores rome venice lucca modena bari dijon geneva basel breda braga crete bristol essex kobe
manila bali melbourne hobart atlanta reno columbus richmond raleigh tijuana asuncion travis gerrit
miro maya okta eliza cody devin apollo minerva orion artemis hera thor odin freya isis venus luna
gaia juno atlas mercury diana athena hermes europa asia africa america oceania lucia helena elizabeth
louisiana maryland georgia victoria florida nevada sierra santa santo san christchurch kingston
ville
""")

COMMON_WORD_SURNAMES = _words("""
smith brown black white green young king hill wood moore hall ward wells walker turner carter parker
cooper fisher mason hunter baker cook miller taylor wright hopper bishop butler porter archer bell
bird bush chambers church cross fox gardner glass gold golden gray grey hart house lamb lane law
little long love marsh mills moon page palmer payne pike pool potter reed rice rivers rose rush
sharp shepherd short silver singer snow spencer stark steel stone strong swan swift tanner thatcher
tucker wall warren waters weaver webb west wheeler winter wise wolf woods frost fields barber brewer
carpenter chandler dyer farmer fowler fuller glover hammer hooper knight lord marshall painter
parsons piper ryder sawyer slater spicer stewart banks bates bean best blake bond booth bowman
burns castle chase coates cole coleman cox crane crow dawson drake duke dunn english finch fleming
flowers ford forest french gates gill goodman graves grimes hale hardy harper hawk hood horn
lake mann meadows moss north oakley park parks peck pope pratt savage shaw sharpe shields small
sparks summers sweet thorne tower wade walls watts wild wilde wren york
""")

# Countries, regions, large cities and languages (English and local spellings): a greeting or
# sign-off before one ("Hello Berlin!", "Translate to German") and a lone one are no person. One word
# each: a city of two words whose second is a given name is a whole run of FIRMS ("são paulo": Paulo
# alone is a person).
PLACES = _words("""
afghanistan albania algeria andorra angola argentina armenia australia austria azerbaijan bahamas bahrain
bangladesh barbados belarus belgium belize benin bhutan bolivia bosnia botswana brazil brasil brunei bulgaria
burundi cambodia cameroon canada chile colombia congo croatia cuba cyprus czechia denmark djibouti dominica
ecuador egypt eritrea estonia eswatini ethiopia fiji finland france gabon gambia germany deutschland ghana
greece grenada guatemala guinea guyana haiti honduras hungary iceland indonesia iran iraq ireland israel
italy italia jamaica japan kazakhstan kosovo kuwait kyrgyzstan laos latvia lebanon lesotho liberia libya
liechtenstein lithuania luxembourg madagascar malawi malaysia maldives mali malta mauritania mauritius
mexico méxico moldova monaco mongolia montenegro morocco mozambique myanmar namibia nauru nepal netherlands
nederland nicaragua niger nigeria norway oman pakistan palau palestine panama paraguay peru philippines
poland portugal qatar romania russia rwanda samoa senegal serbia seychelles singapore slovakia slovenia
somalia spain españa sudan suriname sweden switzerland schweiz suisse svizzera syria taiwan tajikistan
tanzania thailand togo tonga tunisia turkey türkiye turkmenistan tuvalu uganda ukraine uruguay uzbekistan
vanuatu vatican venezuela vietnam yemen zambia zimbabwe europe europa asia africa oceania scandinavia
frankreich spanien italien österreich belgien niederlande polen schweden norwegen dänemark finnland
espagne allemagne italie belgique suisse pays-bas alemania francia italia bélgica inglaterra
england scotland wales holland flanders wallonia bavaria bayern saxony sachsen catalonia catalunya
andalusia galicia tuscany toscana lombardy lombardia sicily sicilia sardinia provence normandy normandie
brittany bretagne alsace burgundy bourgogne lorraine savoy corsica texas california florida ohio oregon
london paris berlin madrid rome roma milan milano munich münchen hamburg cologne köln frankfurt vienna wien
zurich zürich geneva genève brussels bruxelles amsterdam rotterdam utrecht antwerp antwerpen lisbon lisboa
porto barcelona valencia seville sevilla bilbao malaga málaga naples napoli turin torino florence firenze
venice venezia bologna genoa genova palermo athens dublin edinburgh glasgow manchester liverpool leeds
birmingham bristol oxford cambridge cardiff belfast copenhagen stockholm oslo helsinki reykjavik warsaw
warszawa krakow kraków prague praha budapest bucharest sofia belgrade zagreb ljubljana bratislava vilnius
riga tallinn kyiv kiev moscow istanbul ankara cairo lagos nairobi accra dakar johannesburg cape town
casablanca tunis dubai doha riyadh tehran karachi lahore delhi mumbai bangalore bengaluru chennai kolkata
dhaka kathmandu colombo bangkok hanoi jakarta manila singapore kuala lumpur beijing shanghai shenzhen
hong kong taipei seoul tokyo osaka kyoto sydney melbourne brisbane perth auckland wellington toronto
montreal montréal vancouver ottawa chicago boston seattle denver dallas houston atlanta miami detroit
philadelphia phoenix portland austin nashville orleans vegas mexico bogotá bogota lima quito caracas
santiago buenos aires montevideo rio brasília lyon marseille toulouse nice nantes
strasbourg bordeaux lille stuttgart düsseldorf dresden leipzig hannover bremen nuremberg nürnberg
english german french spanish italian dutch portuguese chinese japanese korean russian arabic hindi turkish
polish swedish danish norwegian finnish greek hebrew czech hungarian romanian ukrainian thai vietnamese
indonesian malay persian urdu bengali tamil swahili latin deutsch français español italiano nederlands
portugués englisch französisch spanisch italienisch niederländisch anglais allemand espagnol italien inglés
alemán francés italiano inglese tedesco francese spagnolo engels duits frans spaans italiaans
""")
